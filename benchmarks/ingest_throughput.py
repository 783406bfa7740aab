"""Ingest throughput: synthetic pair results for N nodes pushed through the real ingest path.

Registers N synthetic nodes by heartbeat, requests and starts a connectivity
sweep (every pair row created at start), then answers every command of every
round as the agents would, through ``ingest.ingest_results`` in the batches the
server worker's ``cluster_health.results`` task takes; round advances, live
broadcasts (in-memory channel layer) and the verdict are included in the time.
For reference it also times the one-message-per-task path (``ingest_result``)
on the first rounds of the same sweep.

    .venv/bin/python benchmarks/ingest_throughput.py --nodes 1024 \
        --database postgres://postgres@127.0.0.1:5432/postgres

With ``--database`` a scratch database is created on that server and dropped
after; without it, a scratch SQLite file.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

TARGET_RESULTS_PER_S = 2000


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--nodes", type=int, default=64)
    parser.add_argument("--database", default=None, help="postgres:// server URL (default: scratch SQLite)")
    parser.add_argument("--batch", type=int, default=500)
    args = parser.parse_args()
    print(json.dumps(run(args.database, args.nodes, args.batch), indent=2))


def run(database: str | None = None, nodes: int = 1024, batch: int = 500) -> dict:
    """Runner entry point: figures for a scratch database on ``database`` (None: SQLite)."""
    from benchmarks.scratch import scratch_database

    with scratch_database(database):
        return measure(nodes, batch)


REFERENCE_HALVES = 2000  # the one-half-per-call reference: enough calls for a steady figure, not more


def measure(n: int, batch: int, reference_rounds: int | None = None) -> dict:
    """Ingest a whole connectivity sweep over ``n`` synthetic nodes into the current database.

    The first ``reference_rounds`` rounds (by default as many as hold about
    REFERENCE_HALVES halves) go one half per call, as the reference.
    """
    if reference_rounds is None:
        reference_rounds = max(1, min(8, round(REFERENCE_HALVES / max(2, n - n % 2))))
    from django.conf import settings
    from django.db import connection

    from cluster_health import sweeps
    from cluster_health.models import PairProbe, Sweep
    from cluster_health.queues import dispatch
    from devtools.sweep_driver import heartbeat

    settings.CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}
    # The synthetic agents are alive throughout: creating 523,776 rows takes longer than the
    # online window, and a node judged offline would close its pairs without a single result.
    settings.NODE_ONLINE_AFTER_S = 24 * 3600
    for i in range(n):
        heartbeat(f"b{i:04d}", address=f"10.{i // 250}.{i % 250}.1")
    with dispatch.capture() as sent:
        sweep = sweeps.request_sweep(source="command", kind="connectivity")
        t0 = time.perf_counter()
        sweeps.start_sweep(sweep.pk)
        start_s = time.perf_counter() - t0
        pair_rows = PairProbe.objects.filter(sweep=sweep).count()
        single, single_s, batched, batched_s = _answer_rounds(sent, batch, reference_rounds)
    sweep = Sweep.objects.get(pk=sweep.pk)
    return {
        "database": connection.vendor,
        "nodes": n,
        "pairs": pair_rows,
        "rounds": sweep.total_rounds,
        "sweep_id": sweep.pk,
        "verdict": sweep.verdict,
        "start_sweep_s": round(start_s, 2),
        "batch": batch,
        "batched_results": batched,
        "batched_s": round(batched_s, 2),
        "results_per_s": round(batched / batched_s) if batched_s else None,
        "single_results": single,
        "single_results_per_s": round(single / single_s) if single_s else None,
        "target_results_per_s": TARGET_RESULTS_PER_S,
    }


def _answer_rounds(
    sent: list, batch: int, reference_rounds: int, server_tasks: list | None = None
) -> tuple[int, float, int, float]:
    """Answer every round's commands until none come; the first rounds one half per call (the reference).

    The server tasks the sweep sent are added to ``server_tasks`` when given (else dropped)."""
    from cluster_health import ingest
    from devtools.captured import take_probe_commands
    from devtools.sweep_driver import result_for

    single = batched = 0
    single_s = batched_s = 0.0
    rounds = 0
    while True:
        commands = take_probe_commands(sent, server_tasks)
        if not commands:
            return single, single_s, batched, batched_s
        rounds += 1
        results = [result_for(cmd) for cmd in commands]
        t0 = time.perf_counter()
        if rounds <= reference_rounds:  # reference: one message per task, as before batching
            for res in results:
                ingest.ingest_result(res)
            single, single_s = single + len(results), single_s + time.perf_counter() - t0
        else:
            for k in range(0, len(results), batch):
                ingest.ingest_results(results[k : k + batch])
            batched, batched_s = batched + len(results), batched_s + time.perf_counter() - t0


if __name__ == "__main__":
    main()
