"""A small distributed job for the hang tests, run by torchrun (Gloo, CPU): ``hung_job.py MODE``.

- ``loader``: rank 1 never reaches the second all_reduce (its data loader loops);
- ``collective``: every rank waits in a second all_reduce that rank 1 never joins... by sleeping
  inside it after its peers entered (a stopped rank is made by the test, with SIGSTOP);
- ``train``: all ranks keep calling all_reduce (progressing);
- ``mismatch``: rank 1 calls broadcast where rank 0 calls all_reduce.
"""

import sys
import time

import torch
import torch.distributed as dist


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
    if mode == "train":
        while True:
            dist.all_reduce(t)
            time.sleep(0.05)
    dist.all_reduce(t)  # "collective": rank 1 is stopped here by the test
    time.sleep(3600)


if __name__ == "__main__":
    main(sys.argv[1])
