"""A small distributed job for the hang tests, run by torchrun (Gloo, CPU): ``hung_job.py MODE``.

- ``loader``: rank 1 never reaches the second all_reduce (its data loader loops);
- ``collective``: every rank waits in a second all_reduce that rank 1 never joins... by sleeping
  inside it after its peers entered (a stopped rank is made by the test, with SIGSTOP);
- ``train``: all ranks keep calling all_reduce (progressing), 50 ms apart;
- ``straggler``: all ranks keep calling all_reduce, and one rank (``HUNG_JOB_SLOW_RANK``, default the
  last) sleeps ``HUNG_JOB_SLOW_S`` (default 0.3 s) before each: the slow rank everyone waits for.
  In both, ``HUNG_JOB_FLOATS`` sets the all_reduce's size (default 4 floats; a large one makes a
  shaped link hold each step back);
- ``mismatch``: rank 1 calls broadcast where rank 0 calls all_reduce;
- ``init``: init_process_group (HUNG_JOB_BACKEND: gloo, or nccl with device_id) and one all_reduce: what the
  init-time hang tests start with a rank missing, a wrong MASTER_ADDR, a held or firewalled port;
- ``groups``: two process groups of both ranks ("data", "experts") entered in different orders: rank 0
  all_reduces on "data" first, rank 1 on "experts" first (the multi-group hang).

Its Flight Recorder is read from outside when the launcher sets ``TORCH_FR_BUFFER_SIZE`` and gives each
rank its own ``TORCH_WORKER_SERVER_SOCKET``: the job runs under torchelastic's ``worker_main()``, as a
job that wants its worker server does (without that variable it changes nothing).
"""

import os
import sys
import time

import torch
import torch.distributed as dist
from torch.distributed.elastic.control_plane import worker_main


def load_batch():
    while True:  # a data loader that never returns
        time.sleep(0.2)


def train(mode: str, rank: int, world: int) -> None:
    slow = float(os.environ.get("HUNG_JOB_SLOW_S", "0.3")) if mode == "straggler" else 0.0
    slow_rank = int(os.environ.get("HUNG_JOB_SLOW_RANK", str(world - 1)))
    t = torch.ones(int(os.environ.get("HUNG_JOB_FLOATS", "4")))
    while True:
        if not slow:
            time.sleep(0.05)
        elif rank == slow_rank:
            time.sleep(slow)  # the straggler's own slower step; the others go straight on and wait for it
        dist.all_reduce(t)


def init() -> None:
    """``init``: init_process_group and one all_reduce, the backend from HUNG_JOB_BACKEND (gloo, or nccl
    on the rank's GPU with device_id, so NCCL connects at init): the init-time hangs (a rank missing,
    another master, the store's port held or firewalled, an address peers cannot reach) wait in here."""
    backend = os.environ.get("HUNG_JOB_BACKEND", "gloo")
    if backend == "nccl":
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
        dist.init_process_group("nccl", device_id=device)
        t = torch.ones(4, device=device)
    else:
        dist.init_process_group(backend)
        t = torch.ones(4)
    dist.all_reduce(t)
    print(f"rank {dist.get_rank()} ready", flush=True)
    time.sleep(3600)


def main(mode: str) -> None:
    if mode == "init":
        init()
        return
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    t = torch.ones(4)
    dist.all_reduce(t)  # every rank gets this far
    print(f"rank {rank} ready", flush=True)
    if mode == "loader" and rank == 1:
        load_batch()
    if mode == "mismatch" and rank == 1:
        dist.broadcast(t, src=0)
    if mode == "groups":
        data = dist.new_group([0, 1], group_desc="data")
        experts = dist.new_group([0, 1], group_desc="experts")
        for group in (data, experts) if rank == 0 else (experts, data):
            dist.all_reduce(t, group=group)
    if mode in ("train", "straggler"):
        train(mode, rank, dist.get_world_size())
    dist.all_reduce(t)  # "collective": rank 1 is stopped here by the test
    time.sleep(3600)


if __name__ == "__main__":
    server = worker_main()  # torchelastic's worker server, when TORCH_WORKER_SERVER_SOCKET names its socket
    assert server is not None
    with server:
        main(sys.argv[1])
