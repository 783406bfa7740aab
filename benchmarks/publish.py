"""Publishing a round's probe commands: the server's writer beside Celery's ``send_task``, in one process.

    .venv/bin/python benchmarks/publish.py [--nodes 256 1024] [--runs 7]

A round at N nodes is N signed probe commands, one per node's queue, sent by the ingest
consumer as it advances the sweep: the relay a round waits on. For N commands as the
server builds and signs them (``dispatch.send_commands`` on a round's commands), it
times, alternately and on a private redis-server:

- reference: each message through Celery's ``app.send_task`` with one producer in a
  batch (``producer.batch``, one pipeline), as the server sent them before 2026-11-23;
- server: ``dispatch.task_message`` for each, one Redis pipeline (what it sends now).

Both write the same text (tests/queues/test_dispatch_wire.py compares them field for field). The
figures are medians of whole rounds, signing included, and their ratio.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def round_commands(n: int) -> list[dict]:
    """A round's commands at ``n`` nodes, built as ``dispatch.build_commands`` builds them."""
    from types import SimpleNamespace

    from cluster_health.queues import dispatch

    sweep = SimpleNamespace(pk=7, backend="gloo", params={})
    settings = dispatch.probe_settings({}, "bandwidth")
    commands = []
    for k in range(n // 2):
        probe = SimpleNamespace(pk=1000 + k, rendezvous=dispatch.new_rendezvous())
        members = [(f"f{2 * k:04d}", f"10.0.{k // 250}.{2 * k % 250 + 1}"), (f"f{2 * k + 1:04d}", "10.1.0.1")]
        commands += dispatch.build_commands(sweep, "pair", probe, members, settings)
    return commands


def celery_send(messages) -> None:
    """The reference: Celery's send_task per message, one producer, its batch one pipeline."""
    from cluster_health.queues import dispatch
    from devtools.celery_send import celery_send as send_task_each

    send_task_each(messages, batch=dispatch.PUBLISH_BATCH)


def measure(nodes: list[int], runs: int) -> dict:
    from agents import signing
    from cluster_health import shared_redis
    from cluster_health.models import AgentKey
    from cluster_health.queues import dispatch

    client = shared_redis.client()
    out: dict = {"runs": runs}
    for n in nodes:
        commands = round_commands(n)
        AgentKey.objects.bulk_create([AgentKey.sealed(signing.new_key(c["node"])) for c in commands], batch_size=500)
        times: dict[str, list[float]] = {"reference": [], "server": []}
        for _ in range(runs):
            for name, sender in (("reference", celery_send), ("server", dispatch._redis_send)):
                client.flushdb()
                with dispatch.using(sender):
                    t0 = time.perf_counter()
                    dispatch.send_commands(commands)
                    times[name].append(time.perf_counter() - t0)
                assert sum(client.llen(f"agent.{c['node']}") for c in commands) == n
        ref, ours = statistics.median(times["reference"]), statistics.median(times["server"])
        out[f"nodes_{n}"] = {
            "commands": n,
            "reference_ms": round(ref * 1000, 1),
            "server_ms": round(ours * 1000, 1),
            "ratio": round(ref / ours, 1),
        }
    return out


def run(nodes: tuple = (256, 1024), runs: int = 7) -> dict:
    """Runner entry point: a private redis-server and a scratch SQLite database for the nodes' keys."""
    from benchmarks.scratch import scratch_database
    from devtools.services import RedisServer

    with tempfile.TemporaryDirectory(prefix="bench-publish-") as tmp:
        redis = RedisServer(Path(tmp) / "redis")
        redis.workdir.mkdir(parents=True)
        redis.start()
        try:
            os.environ.update(REDIS_URL=redis.url, CLUSTER_HEALTH_BROKER_URL=redis.url)
            with scratch_database(None):
                return measure(list(nodes), runs)
        finally:
            redis.stop()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, nargs="+", default=[256, 1024])
    parser.add_argument("--runs", type=int, default=7)
    opts = parser.parse_args()
    print(json.dumps(run(tuple(opts.nodes), opts.runs), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
