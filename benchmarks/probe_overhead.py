"""Probe overhead per round: a pair probe started cold beside one forked from the warm probe process.

    .venv/bin/python benchmarks/probe_overhead.py [--rounds 8]

One round of a connectivity sweep, as an agent pair runs it: both halves of a
pair probe (Gloo, 2 ranks on 127.0.0.1, last stage `collective`, the default
sizes and timeouts of the contract) started at once through `run_probe` with
the Redis rendezvous of a private redis-server. The overhead of a round is its
wall time (both halves started until both returned) minus the time inside
collectives (the larger `collectives_s` of the two halves). Cold rounds
(`CLUSTER_HEALTH_WARM_PROBES=0`: `python -m agents.probe`, torch imported per
probe) and warm rounds (forked from the warm probe process) alternate, so a
busy machine hurts both alike; the cold figure is the reference.
"""

from __future__ import annotations

import os
import secrets
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from agents import contract, runner  # noqa: E402
from benchmarks.bed import main_for  # noqa: E402
from devtools.environ import restore_env  # noqa: E402
from devtools.probe_commands import loopback_pair, run_ranks  # noqa: E402
from devtools.services import RedisServer  # noqa: E402

SPLIT = ("spawn_s", "import_wait_s", "rendezvous_s", "init_s", "collectives_s")


def command(rank: int, rendezvous: str) -> dict:
    return loopback_pair(
        rank,
        rendezvous,
        last_stage="collective",
        sizes=list(contract.DEFAULT_SIZES)[:1],
        timeouts=dict(contract.DEFAULT_TIMEOUTS),
        deadline_s=60.0,
    )


def one_round(broker_url: str) -> dict:
    rdv = "bench" + secrets.token_hex(6)
    began = time.perf_counter()
    results = run_ranks([command(0, rdv), command(1, rdv)], broker_url)
    wall = time.perf_counter() - began
    for r in results:
        if r["status"] != "ok":
            raise RuntimeError(f"a benchmark probe failed: {r['reason']}: {r['hint']}")
    inside = max(r["timings"].get("collectives_s", 0.0) for r in results)
    return {
        "wall_s": wall,
        "overhead_s": wall - inside,
        "split": {k: max(r["timings"].get(k, 0.0) for r in results) for k in SPLIT},
    }


def set_warm(on: bool) -> None:
    os.environ["CLUSTER_HEALTH_WARM_PROBES"] = "1" if on else "0"
    if not on:
        return
    runner.prewarm()
    end = time.monotonic() + 120
    while runner.warm_host() is None:
        if time.monotonic() > end:
            raise RuntimeError("the warm probe process did not start within 120 s")
        time.sleep(0.1)


def median(values) -> float:
    return round(statistics.median(values), 4)


def run(rounds: int = 8) -> dict:
    saved = os.environ.get("CLUSTER_HEALTH_WARM_PROBES")
    with tempfile.TemporaryDirectory(prefix="bench-overhead-") as tmp:
        redis = RedisServer(Path(tmp))
        redis.start()
        try:
            rows: dict[str, list[dict[str, Any]]] = {"cold": [], "warm": []}
            set_warm(True)
            one_round(redis.url)  # first use of the warm process and of the redis server
            for _ in range(rounds):
                for mode in ("cold", "warm"):
                    set_warm(mode == "warm")
                    rows[mode].append(one_round(redis.url))
        finally:
            runner.shutdown_warm_host()
            redis.stop()
            restore_env("CLUSTER_HEALTH_WARM_PROBES", saved)
    out: dict[str, Any] = {"rounds": rounds}
    for mode, values in rows.items():
        out[f"{mode}_round_s"] = median(v["wall_s"] for v in values)
        out[f"{mode}_overhead_s"] = median(v["overhead_s"] for v in values)
        out[f"{mode}_split_s"] = {k: median(v["split"][k] for v in values) for k in SPLIT}
    out["warm_overhead_max_s"] = round(max(v["overhead_s"] for v in rows["warm"]), 4)
    out["cold_over_warm"] = (
        round(out["cold_overhead_s"] / out["warm_overhead_s"], 1) if out["warm_overhead_s"] else None
    )
    return out


if __name__ == "__main__":
    sys.exit(main_for(run, __doc__, {"--rounds": {"type": int, "default": 8}}))
