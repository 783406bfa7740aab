"""Bandwidth honesty: a probe pair's busbw against iperf3 and against a bare all_reduce loop, on one link.

    flock /tmp/netns.lock .venv/bin/python benchmarks/bandwidth_honesty.py [--runs 3]

Method. Two hosts of the namespace test bed (``benchmarks/bed.py``), joined by the
bridge: host1 is rank 0 and the iperf3 client, host2 is rank 1 and the iperf3
server. For each link condition (unshaped; host1's egress shaped with tc tbf to
1 Gbit/s; then to 100 Mbit/s) and in the same run:

- iperf3, one TCP stream host1 -> host2 (the shaped direction), its receiver's
  ``bits_per_second``;
- the probe, as an engineer runs it by hand on two hosts: ``python -m agents pair``
  inside each namespace (rank 0 ``--bind``, rank 1 ``--connect``), one message size,
  the same iterations and warm-up as the bare loop, its bandwidth stage given room
  (``--timeout bandwidth=60``) so no size is cut;
- a bare ``torch.distributed`` loop: ``benchmarks/probe_loopback.py --bare-rank``, two
  fresh Gloo processes, one per namespace, ``GLOO_SOCKET_IFNAME=eth0``, the same size,
  warm-up and iterations, timing only the iterations (as the probe does).

Probe and bare runs alternate (``runs`` of each) so a busy machine hurts both alike;
figures are medians. Size per condition: 64 MiB unshaped, 16 MiB at 1 Gbit/s, 4 MiB
at 100 Mbit/s (a few tenths of a second per iteration at most).

Conversion. busbw = algbw * 2(n-1)/n (nccl-tests); for n = 2 ranks busbw = algbw =
bytes / time per all_reduce. In a 2-rank all_reduce each rank sends the whole buffer
once over the link (half in the reduce-scatter, half in the all-gather) and receives
as much, so busbw is the payload rate in each direction, the quantity iperf3's
``bits_per_second`` counts (TCP payload): Mbit/s = busbw GB/s (10^9 bytes) * 8000.
Targets: busbw within 10% of iperf3, and within 5% of the bare loop.
"""

from __future__ import annotations

import json
import random
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks import probe_loopback  # noqa: E402
from benchmarks.bed import main_for, namespace_bed  # noqa: E402

MBIT_PER_GBPS = 8000.0  # GB/s (10^9 bytes) -> Mbit/s
CONDITIONS = (  # (name, tbf rate in Mbit/s or None, message size in bytes)
    ("unshaped", None, 64 * 2**20),
    ("tbf_1gbit", 1000, 16 * 2**20),
    ("tbf_100mbit", 100, 4 * 2**20),
)
IPERF_TARGET = 0.10
BARE_TARGET = 0.05
PROCESS_TIMEOUT_S = 120


def run(
    runs: int = 3, iterations: int = 10, warmup: int = 2, iperf_seconds: float = 3.0, limit_s: float = 900.0
) -> dict:
    """Figures per link condition; see the module docstring for the method."""
    out: dict = {
        "runs": runs,
        "iterations": iterations,
        "warmup": warmup,
        "conversion": "Mbit/s = busbw GB/s * 8000 (2 ranks: busbw = algbw = payload rate per direction)",
    }
    with namespace_bed(2, limit_s) as bed:
        for name, rate, size in CONDITIONS:
            if rate:
                # A burst of 1 ms at the rate (at least 64 kB) lets tbf reach its rate at 1 Gbit/s.
                bed.shape("host1", rate, burst_kb=max(64, int(rate * 1000 / 8 / 1000)))
            try:
                out.update(
                    {
                        f"{name}_{k}": v
                        for k, v in measure_link(bed, size, runs, iterations, warmup, iperf_seconds, rate).items()
                    }
                )
            finally:
                bed.unshape("host1")
    return out


def measure_link(
    bed, size: int, runs: int, iterations: int, warmup: int, iperf_seconds: float, rate: float | None
) -> dict:
    iperf = [bed.iperf3_mbit("host1", "host2", seconds=iperf_seconds)]
    probe, bare = [], []
    for _ in range(runs):
        bare.append(bare_busbw(bed, size, iterations, warmup))
        probe.append(probe_busbw(bed, size, iterations, warmup))
    iperf.append(bed.iperf3_mbit("host1", "host2", seconds=iperf_seconds))
    probe_mbit = statistics.median(probe) * MBIT_PER_GBPS
    bare_mbit = statistics.median(bare) * MBIT_PER_GBPS
    iperf_mbit = statistics.median(iperf)
    figures = {
        "size_bytes": size,
        "probe_busbw_mbit": round(probe_mbit, 1),
        "bare_busbw_mbit": round(bare_mbit, 1),
        "iperf3_mbit": round(iperf_mbit, 1),
        "probe_vs_iperf3": round(probe_mbit / iperf_mbit, 3),
        "probe_vs_bare": round(probe_mbit / bare_mbit, 3),
        "within_10pct_of_iperf3": abs(probe_mbit / iperf_mbit - 1) <= IPERF_TARGET,
        "within_5pct_of_bare": abs(probe_mbit / bare_mbit - 1) <= BARE_TARGET,
        "probe_runs_mbit": [round(v * MBIT_PER_GBPS, 1) for v in probe],
        "bare_runs_mbit": [round(v * MBIT_PER_GBPS, 1) for v in bare],
        "iperf3_runs_mbit": [round(v, 1) for v in iperf],
    }
    if rate:
        figures["shaped_mbit"] = rate
    return figures


def probe_busbw(bed, size: int, iterations: int, warmup: int) -> float:
    """busbw (GB/s) at ``size`` of one pair probe run with the pair CLI, one rank per host."""
    sized = ["--sizes", str(size), *probe_loopback.loop_flags(iterations, warmup), "--timeout", "bandwidth=60"]
    common = [sys.executable, "-m", "agents", "pair", *sized]
    master = bed.host("host1").address
    rank0 = bed.start_in(
        "host1",
        [*common, "--rank", "0", "--bind", master, "--wait", "30"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert rank0.stdout is not None and rank0.stderr is not None  # both piped above
    try:
        listening = rank0.stdout.readline().strip()  # ADDR:PORT, then the result as JSON
        if not listening:
            raise RuntimeError(f"the rank 0 probe printed no address: {rank0.stderr.read()[-2000:]}")
        rank1 = subprocess.run(
            bed.exec_args(bed.host("host2"), [*common, "--rank", "1", "--connect", listening]),
            capture_output=True,
            text=True,
            timeout=PROCESS_TIMEOUT_S,
        )
        rest, err = rank0.communicate(timeout=PROCESS_TIMEOUT_S)
    finally:
        if rank0.poll() is None:
            rank0.kill()
            rank0.wait(timeout=5)
    results = []
    for text, errors in ((rest, err), (rank1.stdout, rank1.stderr)):
        try:
            results.append(json.loads(text))
        except ValueError:
            raise RuntimeError(f"a probe rank printed no result: {text[-1000:]} {errors[-2000:]}") from None
    for r in results:
        if r["status"] != "ok":
            raise RuntimeError(f"the probe did not pass: {r['status']} at {r['stage']} ({r['reason']}): {r['hint']}")
    row = next(s for s in results[0]["sizes"] if s["bytes"] == size)
    return row["busbw_gbps"]


def bare_busbw(bed, size: int, iterations: int, warmup: int) -> float:
    """busbw (GB/s) of the bare loop: two fresh Gloo processes, one per host, over eth0."""
    port = random.randint(20000, 40000)  # the namespaces are fresh: nothing else listens there
    master = bed.host("host1").address
    procs = [
        bed.start_in(
            host,
            probe_loopback.bare_rank_args(
                rank, port, iterations, warmup, "--address", master, "--ifname", "eth0", "--size", str(size)
            ),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for rank, host in enumerate(("host1", "host2"))
    ]
    try:
        outs = [p.communicate(timeout=PROCESS_TIMEOUT_S) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait(timeout=5)
    lines = outs[0][0].strip().splitlines()
    if procs[0].returncode != 0 or not lines:
        raise RuntimeError(f"the bare loop failed: {outs[0][1][-2000:]} {outs[1][1][-2000:]}")
    return json.loads(lines[-1])["busbw_gbps"]


# The command line: each flag with argparse's keywords, its value passed to run() by name.
OPTIONS: dict[str, dict] = {
    "--runs": {"type": int, "default": 3},
    "--iterations": {"type": int, "default": 10},
    "--warmup": {"type": int, "default": 2},
}

if __name__ == "__main__":
    sys.exit(main_for(run, __doc__, OPTIONS))
