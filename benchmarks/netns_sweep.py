"""Sweep time on the namespace test bed: full connectivity sweeps of N = 2, 4, 6, 8 hosts.

    flock /tmp/netns.lock .venv/bin/python benchmarks/netns_sweep.py [--sizes 2 4 6 8] [--repeats 5]

Method. One bed of max(N) hosts (``benchmarks/bed.py``): a scratch database, a
private Redis reached by the agents through its unix socket, the Celery server
worker and beat, one agent per namespace, every setting at the product's default.
Each sweep is requested as the dashboard requests it (``sweeps.request_sweep``,
kind ``connectivity``, the first N hosts) and runs through the real system: the
server worker plans the circle-method rounds and dispatches them, the agents run
the probes, the results are ingested, the next round starts when a round closes.

- ``sweep_s[N]``: the sweep row's ``started`` to ``finished`` (server clock), the
  median of ``repeats`` sweeps per N, the sizes interleaved (2, 4, 6, 8, 2, 4, ...)
  after one warm-up sweep; ``sweep_wall_s[N]`` adds the wait from the request to the
  start (the server worker picking the start task up).
- ``one_round_s[N]``: the reference, measured in the same run, interleaved with the
  sweeps: the time of one round of N hosts, as a sweep of its own (kind ``pairs``,
  the N/2 disjoint pairs of one circle round, last stage ``collective``: the same
  probes, all at once, with the same start and finish costs), median of ``repeats``;
  ``ratio_one_round[N] = sweep_s[N] / ((N - 1) * one_round_s[N])``; the target is <= 1.2.
- ``round_s``: a lone pair's round (the median ``sweep_s`` of the N = 2 sweeps) and
  ``ratio[N] = sweep_s[N] / ((N - 1) * round_s)``: on one machine a round of N/2 pairs
  shares its cores, so this ratio grows with N for reasons a cluster does not have.
- Inside each sweep a round's wall time is its rows' first ``started`` (dispatch) to
  last ``finished`` (ingested); ``round_wall_s[N]`` is the median over the sweep's
  rounds and ``ratio_in_sweep[N] = sweep_s[N] / ((N - 1) * round_wall_s[N])``
  separates the time between rounds from rounds made slower by N/2 pairs sharing
  this machine's cores; ``between_rounds_s[N]`` is the rest of the sweep time (the
  sweep minus its rounds' wall times) per round.
- Probe overhead per round = round wall time minus the time inside collectives
  (the largest ``timings.collectives_s`` of the round's probe halves); median per N
  in ``overhead_s[N]`` and over every round in ``overhead_per_round_s`` (target
  <= 0.3 s). ``probe_timings_s`` are the medians of every half's own timings
  (spawn, import, rendezvous, init, collectives, total, and the runner's duration).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.bed import halves, main_for, median, pair_rows, system_bed  # noqa: E402

TARGET_RATIO = 1.2
TARGET_OVERHEAD_S = 0.3
TIMING_KEYS = ("spawn_s", "import_s", "import_wait_s", "rendezvous_s", "init_s", "collectives_s", "total_s")


def run(sizes=(2, 4, 6, 8), repeats: int = 5, database: str | None = None, limit_s: float = 1200.0) -> dict:
    """Figures per N; see the module docstring for the method."""
    sizes = sorted(set(sizes) | {2})
    with system_bed(max(sizes), limit_s, database=database) as system:
        names = [h.name for h in system.bed.hosts]
        system.sweep(kind="connectivity", nodes=names[:2])  # warm-up: first imports, first connections
        measured: dict[int, list[dict]] = {n: [] for n in sizes}
        one_round: dict[int, list[dict]] = {n: [] for n in sizes}
        for _ in range(repeats):  # interleaved, so that drift on a shared machine hits every N alike
            for n in sizes:
                measured[n].append(sweep_figures(system, names[:n]))
                one_round[n].append(sweep_figures(system, names[:n], pairs=first_round(names[:n])))
    return summarize(measured, repeats, one_round)


def first_round(nodes: list[str]) -> list[list[str]]:
    """The N/2 disjoint pairs of one round of the N-host sweep, run as a sweep of their own."""
    n = len(nodes)
    return [[nodes[i], nodes[n - 1 - i]] for i in range(n // 2)]


def sweep_figures(system, nodes: list[str], pairs: list[list[str]] | None = None) -> dict:
    requested = time.monotonic()
    if pairs:  # one round of a connectivity sweep: the same probes, N/2 pairs at once
        sweep = system.sweep(
            kind="pairs", nodes=nodes, pairs=pairs, last_stage="collective", baseline="none", timeout=120
        )
    else:
        sweep = system.sweep(kind="connectivity", nodes=nodes, timeout=60 + 60 * len(nodes))
    wall = time.monotonic() - requested
    rows = pair_rows(sweep)
    bad = [
        f"{r.node_a.name}-{r.node_b.name}: {r.status} at {r.stage} ({r.reason}) {r.hint}"
        for r in rows
        if r.status != "ok"
    ]
    if sweep.status != "finished" or bad:
        raise RuntimeError(
            f"sweep {sweep.pk} of {len(nodes)} hosts: {sweep.status} {sweep.verdict}; " + "; ".join(bad[:4])
        )
    rounds: dict[int, list[Any]] = {}  # round -> its PairProbe rows
    for row in rows:
        rounds.setdefault(row.round, []).append(row)
    round_walls, overheads = [], []
    for members in rounds.values():
        wall_s = (max(r.finished for r in members) - min(r.started for r in members)).total_seconds()
        inside = max(h.get("timings", {}).get("collectives_s", 0.0) for r in members for h in halves(r))
        round_walls.append(wall_s)
        overheads.append(wall_s - inside)
    return {
        "sweep_s": (sweep.finished - sweep.started).total_seconds(),
        "wall_s": wall,
        "rounds": len(rounds),
        "round_walls": round_walls,
        "overheads": overheads,
        "timings": [dict(h.get("timings") or {}, duration_s=h.get("duration_s")) for r in rows for h in halves(r)],
    }


def summarize(measured: dict[int, list[dict]], repeats: int, one_round: dict[int, list[dict]]) -> dict:
    round_s = median(s["sweep_s"] for s in measured[2])
    assert round_s is not None  # every measured sweep has a duration
    out: dict = {
        "kind": "connectivity",
        "repeats": repeats,
        "round_s": round_s,
        "target_ratio": TARGET_RATIO,
        "target_overhead_s": TARGET_OVERHEAD_S,
    }
    everything = []
    for n, sweeps in measured.items():
        sweep_s = median(s["sweep_s"] for s in sweeps)
        round_wall = median(w for s in sweeps for w in s["round_walls"])
        assert sweep_s is not None and round_wall is not None
        out[f"sweep_s_{n}"] = sweep_s
        out[f"sweep_wall_s_{n}"] = median(s["wall_s"] for s in sweeps)
        out[f"rounds_{n}"] = sweeps[0]["rounds"]
        out[f"ratio_{n}"] = round(sweep_s / ((n - 1) * round_s), 3)
        out[f"one_round_s_{n}"] = one = median(s["sweep_s"] for s in one_round[n])
        assert one is not None
        out[f"ratio_one_round_{n}"] = round(sweep_s / ((n - 1) * one), 3)
        out[f"round_wall_s_{n}"] = round_wall
        out[f"ratio_in_sweep_{n}"] = round(sweep_s / ((n - 1) * round_wall), 3)
        out[f"overhead_s_{n}"] = median(o for s in sweeps for o in s["overheads"])
        out[f"between_rounds_s_{n}"] = median((s["sweep_s"] - sum(s["round_walls"])) / s["rounds"] for s in sweeps)
        everything += sweeps
    out["ratio_max"] = max(out[f"ratio_{n}"] for n in measured)
    out["ratio_one_round_max"] = max(out[f"ratio_one_round_{n}"] for n in measured)
    out["within_target"] = out["ratio_one_round_max"] <= TARGET_RATIO
    out["ratio_in_sweep_max"] = max(out[f"ratio_in_sweep_{n}"] for n in measured)
    out["overhead_per_round_s"] = median(o for s in everything for o in s["overheads"])
    timings = [t for s in everything for t in s["timings"]]
    out["probe_timings_s"] = {k: median(t.get(k) for t in timings) for k in (*TIMING_KEYS, "duration_s")}
    return out


# The command line: each flag with argparse's keywords, its value passed to run() by name.
OPTIONS: dict[str, dict] = {
    "--sizes": {"type": int, "nargs": "+", "default": [2, 4, 6, 8]},
    "--repeats": {"type": int, "default": 5, "help": "sweeps per N (median)"},
    "--database": {"default": None, "help": "postgres:// server URL (default: scratch SQLite)"},
}

if __name__ == "__main__":
    sys.exit(main_for(run, __doc__, OPTIONS))
