"""Loopback busbw of the probe beside a bare torch.distributed all_reduce loop, and where a probe's time goes.

    .venv/bin/python benchmarks/probe_loopback.py [--runs 3] [--iterations 10] [--json]

Both sides use 2 Gloo ranks on 127.0.0.1, a 64 MiB float32 all_reduce, the same
warm-up and iteration counts, and busbw = algbw * 2(n-1)/n (nccl-tests). Runs
alternate (bare, probe, bare, probe, ...) so that a busy machine hurts both alike.
The bare loop's ranks run as fresh processes too (exec, not fork).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from agents import contract  # noqa: E402
from agents.runner import run_probe  # noqa: E402
from devtools.probe_commands import loopback_pair  # noqa: E402

SIZE = 64 * 2**20


def bare_rank(
    rank: int, port: int, iterations: int, warmup: int, address: str = "127.0.0.1", ifname: str = "lo", size: int = SIZE
) -> None:
    """One rank of the bare loop; address, ifname and size let the namespace benchmarks use it between hosts."""
    import warnings

    warnings.filterwarnings("ignore", message="Failed to initialize NumPy")
    import torch
    import torch.distributed as dist

    os.environ["GLOO_SOCKET_IFNAME"] = ifname
    dist.init_process_group("gloo", init_method=f"tcp://{address}:{port}", rank=rank, world_size=2)
    buf = torch.zeros(size // 4, dtype=torch.float32)
    for _ in range(warmup):
        dist.all_reduce(buf)
    began = time.perf_counter()
    for _ in range(iterations):
        dist.all_reduce(buf)
    per_iter = (time.perf_counter() - began) / iterations
    if rank == 0:
        algbw = size / per_iter / 1e9
        print(
            json.dumps({"time_us": per_iter * 1e6, "algbw_gbps": algbw, "busbw_gbps": algbw * contract.busbw_factor(2)})
        )
    dist.destroy_process_group()


def loop_flags(iterations: int, warmup: int) -> list[str]:
    """The timed and warm-up iteration counts, as both the bare loop and the probe's pair CLI take them."""
    return ["--iterations", str(iterations), "--warmup", str(warmup)]


def bare_rank_args(rank: int, port: int, iterations: int, warmup: int, *more: str) -> list[str]:
    """The command line of one rank of the bare loop: this file again, with ``--bare-rank``."""
    return [
        sys.executable,
        __file__,
        "--bare-rank",
        str(rank),
        "--port",
        str(port),
        *loop_flags(iterations, warmup),
        *more,
    ]


def run_bare(iterations: int, warmup: int) -> dict:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    procs = [
        subprocess.Popen(
            bare_rank_args(r, port, iterations, warmup),
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        for r in (0, 1)
    ]
    outs = [p.communicate(timeout=300)[0] for p in procs]
    return json.loads(outs[0].strip().splitlines()[-1])


def run_probe_pair(iterations: int, warmup: int) -> tuple[dict, dict]:
    timeouts = dict(contract.DEFAULT_TIMEOUTS, bandwidth=60.0)
    rdv = "bench-" + os.urandom(4).hex()
    sized: dict[str, Any] = {
        "sizes": list(contract.DEFAULT_SIZES),
        "iterations": iterations,
        "warmup": warmup,
        "deadline_s": 120.0,
    }
    listening, results = threading.Event(), {}
    port = {}

    def on_event(event):
        if event.get("event") == "listening":
            port["port"] = event["port"]
            listening.set()

    def rank0():
        results[0] = run_probe(loopback_pair(0, rdv, timeouts=timeouts, **sized), on_event=on_event)

    thread = threading.Thread(target=rank0)
    thread.start()
    listening.wait(60)
    results[1] = run_probe(loopback_pair(1, rdv, timeouts=timeouts, **sized), port=port["port"])
    thread.join()
    return results[0], results[1]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--iterations", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--bare-rank", type=int)
    parser.add_argument("--port", type=int)
    parser.add_argument("--address", default="127.0.0.1")
    parser.add_argument("--ifname", default="lo")
    parser.add_argument("--size", type=int, default=SIZE)
    args = parser.parse_args()
    if args.bare_rank is not None:
        return bare_rank(args.bare_rank, args.port, args.iterations, args.warmup, args.address, args.ifname, args.size)

    bare, probe, timings = [], [], []
    for _ in range(args.runs):
        bare.append(run_bare(args.iterations, args.warmup)["busbw_gbps"])
        r0, r1 = run_probe_pair(args.iterations, args.warmup)
        assert r0["status"] == r1["status"] == "ok", (r0["hint"], r1["hint"])
        size = next(s for s in r0["sizes"] if s["bytes"] == SIZE)
        probe.append(size["busbw_gbps"])
        # Rank 1 starts after rank 0 has bound its store, so its rendezvous is the pair's own cost.
        timings.append(dict(r1["timings"], duration_s=r1["duration_s"]))
    keys = ["spawn_s", "import_s", "import_wait_s", "rendezvous_s", "init_s", "collectives_s", "total_s", "duration_s"]
    report = {
        "size_bytes": SIZE,
        "runs": args.runs,
        "iterations": args.iterations,
        "warmup": args.warmup,
        "bare_busbw_gbps": {"median": statistics.median(bare), "all": bare},
        "probe_busbw_gbps": {"median": statistics.median(probe), "all": probe},
        "probe_timings_median_s": {k: round(statistics.median(t[k] for t in timings), 4) for k in keys},
        "cpus": os.cpu_count(),
    }
    if args.json:
        print(json.dumps(report, indent=2))
        return
    print(f"busbw at 64 MiB, 2 Gloo ranks on loopback, median of {args.runs} runs:")
    print(f"  bare all_reduce loop  {report['bare_busbw_gbps']['median']:.3f} GB/s  {bare}")
    print(f"  probe bandwidth stage {report['probe_busbw_gbps']['median']:.3f} GB/s  {probe}")
    print("one pair probe (rank 1, median), seconds:")
    for k, v in report["probe_timings_median_s"].items():
        print(f"  {k:14s} {v:.3f}")


if __name__ == "__main__":
    main()
