"""A small distributed job for the hang tests, run by torchrun (Gloo, CPU): ``hung_job.py MODE``.

- ``loader``: rank 1 never reaches the second all_reduce (its data loader loops);
- ``collective``: every rank waits in a second all_reduce that rank 1 never joins... by sleeping
  inside it after its peers entered (a stopped rank is made by the test, with SIGSTOP);
- ``train``: all ranks keep calling all_reduce (progressing);
- ``mismatch``: rank 1 calls broadcast where rank 0 calls all_reduce;
- ``groups``: two process groups of both ranks ("data", "experts") entered in different orders: rank 0
  all_reduces on "data" first, rank 1 on "experts" first (the multi-group hang).

Its Flight Recorder is read from outside when the launcher sets ``TORCH_FR_BUFFER_SIZE`` and gives each
rank its own ``TORCH_WORKER_SERVER_SOCKET``: the job runs under torchelastic's ``worker_main()``, as a
job that wants its worker server does (without that variable it changes nothing).
"""

import sys
import time

import torch
import torch.distributed as dist
from torch.distributed.elastic.control_plane import worker_main


def load_batch():
    while True:  # a data loader that never returns
        time.sleep(0.2)


def main(mode: str) -> None:
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
    if mode == "train":
        while True:
            dist.all_reduce(t)
            time.sleep(0.05)
    dist.all_reduce(t)  # "collective": rank 1 is stopped here by the test
    time.sleep(3600)


if __name__ == "__main__":
    server = worker_main()  # torchelastic's worker server, when TORCH_WORKER_SERVER_SOCKET names its socket
    assert server is not None
    with server:
        main(sys.argv[1])
