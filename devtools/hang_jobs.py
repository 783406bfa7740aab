"""Jobs to hang on purpose: devtools/hung_job.py's two Gloo ranks, one per host of a namespace test
bed (the hang tests and benchmarks/hang.py), launched as srun launches ranks."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from agents.hangs import procs, stacks
from devtools.testbed import TestBed

JOB = Path(__file__).resolve().parent / "hung_job.py"


def start_on_bed(
    bed: TestBed, hosts: list[str], port: int, log: Path, mode: str = "train", flight: Path | None = None
) -> list[subprocess.Popen[Any]]:
    """One rank per host (rank i on hosts[i], the master on hosts[0]), each on the interface of its
    host's address; returns once every rank passed its first all_reduce (RuntimeError otherwise).
    With ``flight`` (a short folder: a socket's address is at most 107 bytes), the job's Flight
    Recorder is on and rank i's worker server answers on ``flight/rank{i}.sock``."""
    master = bed.host(hosts[0]).address
    out = log.open("wb")
    ranks = []
    for rank, host in enumerate(hosts):
        launch = [
            f"RANK={rank}",
            "LOCAL_RANK=0",
            f"WORLD_SIZE={len(hosts)}",
            f"MASTER_ADDR={master}",
            f"MASTER_PORT={port}",
            f"GLOO_SOCKET_IFNAME={bed.interface_of(host)}",
            "OMP_NUM_THREADS=1",
        ]
        if flight is not None:
            launch += ["TORCH_FR_BUFFER_SIZE=2000", f"TORCH_WORKER_SERVER_SOCKET={flight}/rank{rank}.sock"]
        ranks.append(bed.start_in(host, ["env", *launch, sys.executable, str(JOB), mode], stdout=out, stderr=out))
    out.close()
    deadline = time.monotonic() + 120
    while log.read_text(errors="replace").count("ready") < len(hosts):
        if time.monotonic() > deadline or any(p.poll() is not None for p in ranks):
            raise RuntimeError("the job did not start: " + log.read_text(errors="replace")[-2000:])
        time.sleep(0.5)
    return ranks


def stop(ranks: list[subprocess.Popen[Any]]) -> None:
    """Kill each rank's whole process group (its namespace shell included) and reap it."""
    for p in ranks:
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        p.wait(10)


def start_init_on_bed(
    bed: TestBed,
    ranks: dict[int, str],
    world_size: int,
    master: str,
    port: int,
    log: Path,
    env: dict[int, dict[str, str]] | None = None,
) -> list[subprocess.Popen[Any]]:
    """``hung_job.py init`` ranks as srun launches them: rank r on host ``ranks[r]`` (a rank left out is
    one never started), every rank's MASTER_ADDR ``master``, its GLOO_SOCKET_IFNAME its host's interface,
    ``env[r]`` over that (another MASTER_ADDR, GLOO_SOCKET_IFNAME=lo). Returns once each rank's process
    at init (its stack in init_process_group: they hang there); RuntimeError when every one exited or they
    are not there within 90 s (one may exit on its own: a rank whose Gloo is refused at a peer's loopback
    address gives up, a rank 0 whose port is taken)."""
    out = log.open("wb")
    started = []
    for rank, host in sorted(ranks.items()):
        launch = {
            "RANK": str(rank),
            "LOCAL_RANK": "0",
            "WORLD_SIZE": str(world_size),
            "MASTER_ADDR": master,
            "MASTER_PORT": str(port),
            "GLOO_SOCKET_IFNAME": bed.interface_of(host),
            "OMP_NUM_THREADS": "1",
            **(env or {}).get(rank, {}),
        }
        argv = ["env", *(f"{k}={v}" for k, v in launch.items()), sys.executable, str(JOB), "init"]
        started.append(bed.start_in(host, argv, stdout=out, stderr=out))
    out.close()
    selector = procs.JobSelector(master_addr=master, master_port=port)
    deadline = time.monotonic() + 90
    while True:  # until every rank still running shows an init frame (torch's import takes seconds)
        alive = [p for p in started if p.poll() is None]
        found = procs.find_ranks(selector) + procs.find_ranks(selector, other_master=True)
        ready = [r for r in found if stacks.init_stage(stacks.dump(r.pid).get("threads") or [])]
        if alive and len(ready) >= len(alive):
            return started
        if not alive or time.monotonic() > deadline:
            stop(started)
            raise RuntimeError("the ranks did not reach init: " + log.read_text(errors="replace")[-2000:])
        time.sleep(0.5)
