"""Ingest throughput: synthetic pair results pushed through the real ingest function.

Plans a connectivity sweep over N synthetic nodes, then answers every command of
every round with ``ingest.ingest_result`` (each half is one message, as from an
agent), round advances and verdict included. Prints results per second.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres \
        .venv/bin/python benchmarks/ingest_throughput.py --nodes 64

Runs against a throwaway test database (created and dropped), never the real one.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.settings")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--nodes", type=int, default=64)
    args = parser.parse_args()

    import django

    django.setup()
    from django.conf import settings
    from django.test.utils import get_runner

    settings.CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}
    runner = get_runner(settings)(verbosity=0, interactive=False)
    old = runner.setup_databases()
    try:
        run(args.nodes)
    finally:
        runner.teardown_databases(old)


def run(n: int) -> None:
    from django.db import connection

    from cluster_health import dispatch, ingest, sweeps
    from django.utils import timezone

    from cluster_health.models import Node, Sweep
    from tests.sweep_driver import heartbeat, result_for

    for i in range(n):
        heartbeat(f"b{i:04d}", address=f"10.0.{i // 250}.{i % 250 + 1}")
    with dispatch.capture() as sent:
        sweep = sweeps.request_sweep(source="command", kind="connectivity")
        sweeps.start_sweep(sweep.pk)
        results = 0
        started = time.perf_counter()
        while True:
            commands = [kw["command"] for task, _, kw, _ in sent if task == "agent.probe"]
            sent.clear()
            if not commands:
                break
            Node.objects.update(last_heartbeat=timezone.now())  # the agents are alive
            for cmd in commands:
                ingest.ingest_result(result_for(cmd))
                results += 1
        elapsed = time.perf_counter() - started
    sweep = Sweep.objects.get(pk=sweep.pk)
    print(f"{connection.vendor}: {n} nodes, {sweep.total_rounds} rounds, {results} results in {elapsed:.2f}s "
          f"= {results / elapsed:.0f} results/s (verdict {sweep.verdict})")


if __name__ == "__main__":
    main()
