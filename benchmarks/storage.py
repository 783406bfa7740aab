"""Storage: the bytes one nightly full sweep adds to PostgreSQL, fresh, pruned and collapsed, and a year of nights.

One real Gloo pair probe runs first on loopback with the nightly full sweep's
settings (the default message sizes, 1 KiB to 64 MiB, and iterations), through the
agent's own probe code and a private redis-server for its rendezvous: its two
halves are the template of every half written, so each row holds what a real
half holds (per-size results, stage times, versions, evidence). Then N synthetic
nodes register, a full sweep over them is requested and started, and every round's
commands are answered with the template halves (their probe, node and rank put in)
through ``ingest.ingest_results`` in batches of 500, as the ingest buffer's drainer
applies them; the group all_reduce is answered too, so the sweep closes with its
findings and its stored matrix.

Sizes are PostgreSQL's own (``pg_total_relation_size``: heap, TOAST and indexes)
for the tables a sweep writes, read after ``VACUUM FULL`` so that each figure is
what the rows need, not the dead versions updates leave until autovacuum reuses
them (``fresh_on_disk_bytes`` is the size before it). Three states of the same
sweep: fresh; pruned (``manage.py prune``'s raw-detail step: halves and per-size
results cleared); collapsed (its passing pair rows deleted, the stored matrix kept).
A year of nightly sweeps at the defaults (raw detail kept ``RETENTION_DAYS``, 14;
pair rows kept ``PAIR_ROWS_DAYS``, 90) is ``14 x fresh + 76 x pruned + 275 x
collapsed``; the figures scale with the pairs, N(N-1)/2.

    .venv/bin/python benchmarks/storage.py --nodes 1024 \
        --database postgres://postgres@127.0.0.1:5432/postgres
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

TABLES = (
    "cluster_health_pairprobe",
    "cluster_health_groupprobe",
    "cluster_health_sweep",
    "cluster_health_sweepmatrix",
    "cluster_health_finding",
)
BATCH = 500  # halves per ingest_results call, as the drainer takes them
NIGHTS = 365


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--nodes", type=int, default=256)
    parser.add_argument("--database", required=True, help="postgres:// server URL (a scratch database is made)")
    args = parser.parse_args()
    print(json.dumps(run(args.database, args.nodes), indent=2))


def run(database: str | None = None, nodes: int = 1024) -> dict:
    """Runner entry point: the figures for ``nodes`` on a scratch database of ``database``."""
    if not database:
        return {"error": "storage figures are PostgreSQL's: pass --database postgres://..."}
    template = real_halves()
    from benchmarks.scratch import scratch_database

    with scratch_database(database):
        return measure(nodes, template)


def real_halves() -> list[dict]:
    """Both halves of one real Gloo pair probe on loopback, run as a nightly full sweep runs it."""
    from devtools import services
    from devtools.probe_commands import real_halves as run_real_probe

    with tempfile.TemporaryDirectory(prefix="ch-storage-") as workdir:
        redis = services.RedisServer(Path(workdir))
        redis.start()
        try:
            return run_real_probe(redis.url, "storagebench1")
        finally:
            redis.stop()


def sizes(tables=TABLES) -> dict[str, int]:
    from django.db import connection

    with connection.cursor() as cursor:
        return {t: _size(cursor, t) for t in tables}


def _size(cursor, table: str) -> int:
    cursor.execute("SELECT pg_total_relation_size(%s)", [table])
    return int(cursor.fetchone()[0])


def column_bytes() -> dict[str, float]:
    """Average stored bytes of each pair-row column (after TOAST compression), largest first."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT column_name FROM information_schema.columns WHERE table_name = %s", ["cluster_health_pairprobe"]
        )
        columns = [c for (c,) in cursor.fetchall()]
        cursor.execute(
            "SELECT " + ", ".join(f'avg(pg_column_size("{c}"))' for c in columns) + " FROM cluster_health_pairprobe"
        )
        averages = cursor.fetchone()
    out = {c: round(float(v), 1) for c, v in zip(columns, averages, strict=True) if v is not None}
    return dict(sorted(out.items(), key=lambda kv: -kv[1]))


def compact() -> dict[str, int]:
    from django.db import connection

    with connection.cursor() as cursor:
        for t in TABLES:
            cursor.execute(f'VACUUM FULL ANALYZE "{t}"')
    return sizes()


def measure(n: int, template: list[dict]) -> dict:
    from django.conf import settings
    from django.db import connection

    from cluster_health import retention, sweeps
    from cluster_health.models import PairProbe, Sweep, SweepMatrix
    from cluster_health.queues import dispatch
    from devtools.sweep_driver import heartbeat

    settings.CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}
    settings.NODE_ONLINE_AFTER_S = 24 * 3600  # the synthetic agents stay online however long the sweep takes
    for i in range(n):
        heartbeat(f"s{i:04d}", address=f"10.{i // 250}.{i % 250}.1")
    empty = compact()
    t0 = time.perf_counter()
    with dispatch.capture() as sent:
        sweep = sweeps.request_sweep(source="schedule", kind="full")
        sweeps.start_sweep(sweep.pk)
        halves = answer_rounds(sent, template)
    ingest_s = time.perf_counter() - t0
    sweep = Sweep.objects.get(pk=sweep.pk)
    pairs = PairProbe.objects.filter(sweep=sweep).count()
    on_disk = sizes()
    fresh = compact()
    columns_fresh = column_bytes()
    matrix_bytes = len(SweepMatrix.objects.get(sweep=sweep).payload)
    retention.prune(0, pair_rows_days=0)  # raw detail of every sweep (this one) cleared; nothing collapsed
    pruned = compact()
    columns_pruned = column_bytes()
    collapsed_rows = retention.collapse(sweep, sweep.finished)
    collapsed = compact()

    def grown(state: dict[str, int]) -> int:
        return sum(state.values()) - sum(empty.values())

    fresh_b, pruned_b, collapsed_b = grown(fresh), grown(pruned), grown(collapsed)
    raw_days, row_days = settings.RETENTION_DAYS, settings.PAIR_ROWS_DAYS or NIGHTS
    year = raw_days * fresh_b + (row_days - raw_days) * pruned_b + (NIGHTS - row_days) * collapsed_b
    return {
        "database": f"{connection.vendor} {connection.cursor().connection.info.server_version}",
        "nodes": n,
        "pairs": pairs,
        "status": sweep.status,
        "verdict": sweep.verdict,
        "halves": halves,
        "ingest_s": round(ingest_s, 1),
        "fresh_on_disk_bytes": grown(on_disk),
        "fresh_bytes": fresh_b,
        "pruned_bytes": pruned_b,
        "collapsed_bytes": collapsed_b,
        "collapsed_rows": collapsed_rows,
        "fresh_bytes_per_pair": round(fresh_b / pairs, 1),
        "pruned_bytes_per_pair": round(pruned_b / pairs, 1),
        "collapsed_bytes_per_pair": round(collapsed_b / pairs, 1),
        "stored_matrix_bytes": matrix_bytes,
        "by_table_fresh": {t: fresh[t] - empty[t] for t in TABLES},
        "by_table_collapsed": {t: collapsed[t] - empty[t] for t in TABLES},
        "row_columns_fresh_bytes": columns_fresh,
        "row_columns_pruned_bytes": columns_pruned,
        "year_bytes": year,
        "year_without_collapse_bytes": raw_days * fresh_b + (NIGHTS - raw_days) * pruned_b,
        "year_rule": f"{raw_days} x fresh + {row_days - raw_days} x pruned + {NIGHTS - row_days} x collapsed",
    }


def answer_rounds(sent: list, template: list[dict]) -> int:
    """Answer every command with the template half of its rank until no command comes; returns the halves sent."""
    from cluster_health import ingest
    from devtools.captured import take_probe_commands
    from devtools.sweep_driver import result_for

    texts = [json.dumps(half) for half in template]  # a fresh copy per half, as each arrives decoded
    count = 0
    while True:
        commands = take_probe_commands(sent)
        if not commands:
            return count
        results = []
        for cmd in commands:
            if cmd["kind"] != "pair":  # the group all_reduce closing the sweep: a plain passing half
                results.append(result_for(cmd))
                continue
            half = json.loads(texts[cmd["rank"]])
            half.update(probe_id=cmd["probe_id"], sweep_id=cmd["sweep_id"], node=cmd["node"], rank=cmd["rank"])
            results.append(half)
        for k in range(0, len(results), BATCH):
            ingest.ingest_results(results[k : k + BATCH])
        count += len(results)


if __name__ == "__main__":
    main()
