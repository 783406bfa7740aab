"""Idle-gap sweeps on a simulated busy fleet: how many days until every pair has been measured.

A simulated fleet of 1,024 nodes (523,776 pairs) runs a Slurm-like load, seeded: a fixed share of the nodes is
busy at any time (the scheduler starts jobs on free nodes whenever fewer are busy than that, every 5 minutes),
jobs of 1 to 64 nodes (1: 30 %, 2: 20 %, 4: 20 %, 8: 15 %, 16: 10 %, 32: 4 %, 64: 1 %) running a log-normal
time (median 2 h, sigma 1, between 10 minutes and 48 hours) on nodes drawn at random among the free ones. An
idle schedule fires every 15 minutes, as the admin's periodic task would: the nodes free at that moment (not
busy, not held by an earlier idle sweep still running) are the candidates, and the product's own selection,
``cluster_health.sweeps.idle.choose`` (what ``manage.py sweep --idle`` and the ``idle`` schedule call), picks
at most ``max_nodes`` of them, those sharing the most stale pairs (age squared, ``--power``), and their pairs
stalest first, as many as ``max_rounds`` rounds measure (``--max-rounds 0``: every pair among them, the choice
before 2026-11-28 evening), from the simulated fleet's coverage (each pair's last measured time). The sweep's
rounds are the product's own packing of those pairs (``planner.schedule_pairs``); it holds the nodes of its
pairs (no job starts there) for its rounds times ``round_s`` (a modelled round: a bandwidth probe round of a
pairs sweep, not measured here), at least the scheduler's 5-minute step, and every pair it swept counts as
measured when it ends. With ``--catch-share`` (0 by default, as CLUSTER_HEALTH_IDLE_CATCH_SHARE), each idle
sweep then catches busy nodes, the product's ``idle.to_catch``, up to that share of the fleet at once, each
for one pass of an idle sweep plus ``idle.CATCH_WAIT_MIN``: a caught node whose job ends is held (no job
starts there) and is a candidate of the next idle sweep; one whose catch ends first is free again. The gang
check (unless ``--no-gang-check``) measures the pairs of the product's own ``planner.plan("quick", ...)`` over
each job's nodes as it starts, preferring the pairs measured longest ago (``coverage.stalest_first``, as
``manage.py sweep --slurm-job`` does; ``--gang-circle``: plain circle rounds). Nothing else measures pairs: no
nightly sweep.

Reported per busy share: the days until all 523,776 pairs were measured at least once (or the share
measured by the end of the simulated time), the shares measured within the first day and week, the idle
sweeps run, the share of node-time held by them, the busy share actually reached, the gang checks run
with the pairs they measured, and the catches made, those swept, and the caught nodes' idle wait
(``caught_share`` of node-time, ``caught_node_hours_a_day``). ``run()`` (what ``benchmarks/run.py`` calls,
21 simulated days at most) simulates each busy share with the gang check and, with ``compare``, again without
it (under ``without_gang_check``), on the same seed. The simulation
runs in this process with Django set up on a scratch SQLite file that is never written: the selection
gets the coverage as a dictionary, as ``choose(..., measured=...)`` takes it.

    .venv/bin/python benchmarks/coverage.py [--busy 0.5 0.8 0.9] [--max-nodes 256] [--max-rounds 20]
        [--no-gang-check | --compare] [--gang-circle] [--catch-share 0.02] [--power 2] [--seed 1] [--days 60]
        [--json]

Run time on a loaded 2-core machine: 5 to 15 minutes a busy share (``choose`` weighs the pairs of up to about
500 idle nodes every 15 minutes and sorts the pairs among the 256 it takes, 0.01 to 0.2 s each; with catches,
``to_catch`` weighs the busy nodes' pairs with the idle ones as well, 0.2 s more).
"""

from __future__ import annotations

import argparse
import heapq
import json
import math
import os
import random
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

NODES = 1024
STEP_MIN = 5  # the scheduler's look at free nodes
SCHEDULE_MIN = 15  # the idle schedule's period
ROUND_S = 15.0  # a modelled round of a pairs sweep's bandwidth probes
MAX_DAYS = 60
JOB_SIZES = ((1, 0.30), (2, 0.20), (4, 0.20), (8, 0.15), (16, 0.10), (32, 0.04), (64, 0.01))
JOB_MEDIAN_MIN, JOB_SIGMA, JOB_MIN_MIN, JOB_MAX_MIN = 120.0, 1.0, 10.0, 48 * 60.0


def _setup_django() -> None:
    if "django" in sys.modules and getattr(sys.modules["django"], "apps", None) is not None:
        from django.apps import apps

        if apps.ready:
            return
    workdir = tempfile.mkdtemp(prefix="ch-bench-coverage-")
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "cluster_health.settings")
    os.environ.setdefault("DATABASE_URL", f"sqlite:///{workdir}/unused.sqlite3")
    os.environ.setdefault("CLUSTER_HEALTH_VAR_DIR", workdir)
    import django

    django.setup()


def _job(rng: random.Random) -> tuple[int, float]:
    size = rng.choices([s for s, _ in JOB_SIZES], weights=[w for _, w in JOB_SIZES])[0]
    minutes = JOB_MEDIAN_MIN * math.exp(rng.gauss(0.0, JOB_SIGMA))
    return size, min(max(minutes, JOB_MIN_MIN), JOB_MAX_MIN)


def simulate(
    busy: float,
    max_nodes: int,
    seed: int = 1,
    nodes: int = NODES,
    max_days: int = MAX_DAYS,
    gang_check: bool = True,
    power: float = 2.0,
    catch_share: float = 0.0,
    gang_stalest: bool = True,
    max_rounds: int | None = None,
) -> dict:
    """One simulated fleet at ``busy`` share; returns its figures (see the module's docstring)."""
    from cluster_health import coverage
    from cluster_health.core import planner
    from cluster_health.models import pair_key
    from cluster_health.sweeps import idle

    rng = random.Random(seed)
    names = [f"node{i:04d}" for i in range(nodes)]
    total = nodes * (nodes - 1) // 2
    start = datetime(2026, 1, 5, tzinfo=UTC)
    measured: dict[tuple[str, str], datetime] = {}
    free = set(names)
    jobs: list[tuple[float, int, list[str]]] = []  # (end minute, id, nodes)
    held: list[tuple[float, int, list[str], list[tuple[str, str]]]] = []  # idle sweeps running
    sweeps = held_node_min = busy_node_min = caught_node_min = catches = caught_swept = 0
    running: set[str] = set()  # nodes in a job
    catching: dict[str, float] = {}  # busy nodes under a catch -> the minute it ends
    caught: dict[str, float] = {}  # caught nodes whose job ended: held, idle, waiting for the next idle sweep
    catch_limit = math.floor(catch_share * nodes)
    # One idle sweep's pass, and the wait.
    catch_min = idle.pass_rounds(max_nodes, max_rounds) * ROUND_S / 60 + idle.CATCH_WAIT_MIN
    first_day = first_week = None
    job_id = gang_checks = gang_pairs = 0
    choose_s = 0.0
    covered_at = None
    minute = 0.0
    end = max_days * 24 * 60.0
    while minute <= end:
        now = start + timedelta(minutes=minute)
        while jobs and jobs[0][0] <= minute:
            for n in heapq.heappop(jobs)[2]:
                running.discard(n)
                if n in catching:
                    caught[n] = catching.pop(n)
                else:
                    free.add(n)
        for n in [n for n, until in catching.items() if until <= minute]:
            del catching[n]  # its job outlived the catch: it never held the node
        for n in [n for n, until in caught.items() if until <= minute]:
            del caught[n]  # its catch ended before an idle sweep took it: jobs may have it again
            free.add(n)
        while held and held[0][0] <= minute:
            _, _, swept_nodes, pairs = heapq.heappop(held)
            free.update(swept_nodes)
            for a, b in pairs:
                measured[pair_key(a, b)] = now
        if covered_at is None and len(measured) == total:
            covered_at = minute
            break
        # The scheduler fills free nodes until the busy share is reached (held nodes are not free).
        busy_now = nodes - len(free) - len(caught) - sum(len(h[2]) for h in held)
        while busy_now < busy * nodes and free:
            size, minutes = _job(rng)
            size = min(size, len(free), math.ceil(busy * nodes) - busy_now)
            taken = sorted(rng.sample(sorted(free), size))  # Slurm's hostlist order, as the prolog reads it
            free.difference_update(taken)
            running.update(taken)
            if gang_check and size >= 2:
                # The product's gang check: a quick sweep preferring the pairs measured longest ago.
                stalest = gang_stalest and size <= planner.PREFERRED_MAX_NODES
                preferred = coverage.stalest_first(taken, measured) if stalest else None
                for probes in planner.plan("quick", taken, preferred).rounds:
                    for a, b in probes:
                        measured[pair_key(a, b)] = now
                    gang_pairs += len(probes)
                gang_checks += 1
            job_id += 1
            heapq.heappush(jobs, (minute + minutes, job_id, taken))
            busy_now += size
        if minute % SCHEDULE_MIN == 0 and len(free) + len(caught) >= 2:
            candidates = sorted(free | caught.keys())
            t0 = time.perf_counter()
            chosen, pairs = idle.choose(candidates, max_nodes, measured, now, power, max_rounds)
            choose_s += time.perf_counter() - t0
            rounds = len(planner.schedule_pairs(pairs, chosen))
            length = max(STEP_MIN, rounds * ROUND_S / 60)
            free.difference_update(chosen)
            for n in chosen:
                if caught.pop(n, None) is not None:
                    caught_swept += 1
            sweeps += 1
            room = catch_limit - len(catching) - len(caught)
            if room > 0:
                busy_now_list = sorted(running - catching.keys())
                for n in idle.to_catch(busy_now_list, candidates, measured, now, room, power):
                    catching[n] = minute + catch_min
                    catches += 1
            heapq.heappush(held, (minute + length, sweeps, chosen, pairs))
        held_node_min += STEP_MIN * sum(len(h[2]) for h in held)
        caught_node_min += STEP_MIN * len(caught)
        busy_node_min += STEP_MIN * sum(len(j[2]) for j in jobs)
        if first_day is None and minute >= 24 * 60:
            first_day = len(measured) / total
        if first_week is None and minute >= 7 * 24 * 60:
            first_week = len(measured) / total
        minute += STEP_MIN
    ran = max(minute, STEP_MIN) * nodes
    return {
        "busy_share": busy,
        "busy_share_reached": round(busy_node_min / ran, 3),
        "days_to_every_pair": round(covered_at / 1440, 2) if covered_at is not None else None,
        "share_measured_at_end": round(len(measured) / total, 4),
        "pairs_unmeasured_at_end": total - len(measured),
        "days_simulated": round(minute / 1440, 2),
        "share_measured_day_1": round(first_day, 4) if first_day is not None else None,
        "share_measured_day_7": round(first_week, 4) if first_week is not None else round(len(measured) / total, 4),
        "idle_sweeps": sweeps,
        "held_share": round(held_node_min / ran, 4),
        "catch_share": catch_share,
        "catches": catches,
        "caught_swept": caught_swept,
        "caught_share": round(caught_node_min / ran, 5),
        "caught_node_hours_a_day": round(caught_node_min / 60 / (max(minute, STEP_MIN) / 1440), 1),
        "choose_s_mean": round(choose_s / max(sweeps, 1), 4),
        "gang_check": gang_check,
        "gang_stalest": gang_check and gang_stalest,
        "gang_checks": gang_checks,
        "gang_check_pairs": gang_pairs,
    }


def run(
    busy=(0.5, 0.8, 0.9),
    max_nodes: int = 256,
    seed: int = 1,
    nodes: int = NODES,
    gang_check: bool = True,
    compare: bool = True,
    catch_share: float = 0.0,
    power: float = 2.0,
    gang_stalest: bool = True,
    max_rounds: int | None = 20,
    max_days: int = MAX_DAYS,
) -> dict:
    """The figures for each busy share: one simulated fleet each, the same seed; with ``compare`` (and the gang
    check on), each again without the gang check, under ``without_gang_check``. ``max_rounds`` None: every pair
    among the chosen nodes (the product's choice before 2026-11-28 evening)."""
    _setup_django()
    t0 = time.perf_counter()
    out: dict = {
        "nodes": nodes,
        "pairs": nodes * (nodes - 1) // 2,
        "max_nodes": max_nodes,
        "max_rounds": max_rounds,
        "schedule_min": SCHEDULE_MIN,
        "round_s": ROUND_S,
        "seed": seed,
        "catch_share": catch_share,
        "power": power,
    }
    for share in busy:
        out[f"busy_{round(share * 100)}"] = simulate(
            share,
            max_nodes,
            seed,
            nodes,
            gang_check=gang_check,
            power=power,
            catch_share=catch_share,
            gang_stalest=gang_stalest,
            max_rounds=max_rounds,
            max_days=max_days,
        )
    if compare and gang_check:
        out["without_gang_check"] = {
            f"busy_{round(share * 100)}": simulate(
                share,
                max_nodes,
                seed,
                nodes,
                gang_check=False,
                power=power,
                catch_share=catch_share,
                max_rounds=max_rounds,
                max_days=max_days,
            )
            for share in busy
        }
    out["seconds"] = round(time.perf_counter() - t0, 1)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--busy", type=float, nargs="+", default=[0.5, 0.8, 0.9], help="busy shares, 0..1")
    parser.add_argument("--max-nodes", type=int, default=256, help="each idle sweep's --max-nodes")
    parser.add_argument(
        "--max-rounds",
        type=int,
        default=20,
        help="each idle sweep's rounds at most (CLUSTER_HEALTH_IDLE_MAX_ROUNDS); 0: every pair among its nodes",
    )
    parser.add_argument("--days", type=int, default=MAX_DAYS, help="simulated days at most")
    parser.add_argument("--nodes", type=int, default=NODES)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--no-gang-check", action="store_true", help="no gang check before jobs: only idle-gap sweeps measure pairs"
    )
    parser.add_argument(
        "--catch-share",
        type=float,
        default=0.0,
        help="share of the fleet idle sweeps keep caught (CLUSTER_HEALTH_IDLE_CATCH_SHARE), 0..0.1; 0: none",
    )
    parser.add_argument("--power", type=float, default=2.0, help="staleness weight: a pair's age to this power")
    parser.add_argument("--compare", action="store_true", help="each busy share also without the gang check")
    parser.add_argument(
        "--gang-circle",
        action="store_true",
        help="gang checks as plain quick sweeps (circle rounds in hostlist order), not stalest pairs first",
    )
    parser.add_argument("--json", action="store_true")
    opts = parser.parse_args()
    if not all(0 <= b < 1 for b in opts.busy):
        parser.error("--busy: shares from 0 up to (not including) 1")
    if opts.no_gang_check and opts.compare:
        parser.error("--compare runs with the gang check and without it: not with --no-gang-check")
    if not 2 <= opts.max_nodes <= 4096 or opts.nodes < 2:
        parser.error("--max-nodes: 2..4096; --nodes: at least 2")
    if not 0 <= opts.catch_share <= 0.1 or not 0 < opts.power <= 4:
        parser.error("--catch-share: 0..0.1; --power: above 0, at most 4")
    if not 0 <= opts.max_rounds <= 4095 or not 1 <= opts.days <= 365:
        parser.error("--max-rounds: 0..4095; --days: 1..365")
    figures = run(
        opts.busy,
        opts.max_nodes,
        opts.seed,
        opts.nodes,
        not opts.no_gang_check,
        opts.compare,
        opts.catch_share,
        opts.power,
        not opts.gang_circle,
        opts.max_rounds or None,
        opts.days,
    )
    print(json.dumps(figures, indent=None if opts.json else 2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
