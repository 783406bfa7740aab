"""Drive sweeps through the real ingest code without agents: record commands, answer them.

The sender in ``cluster_health.queues.dispatch`` is swapped for a recorder, and each
answer is a result shaped as ``contract.validate_result`` expects, fed to
``ingest.ingest_result`` as the server worker would.
"""

from __future__ import annotations

import time

from agents import contract
from cluster_health import ingest, sweeps
from cluster_health.queues import dispatch
from cluster_health.sweeps import reaper


def heartbeat(name, address="127.0.0.1", facts=None):
    return ingest.record_heartbeat(
        {
            "v": 1,
            "node": name,
            "address": address,
            "facts": facts or {},
            "agent_version": "test",
            "sent_at": time.time(),
        }
    )


def pair_of(cmd) -> set[str]:
    """The two nodes of a pair probe's command (a full sweep's group collective: nobody)."""
    from cluster_health.models import PairProbe

    if cmd["kind"] != "pair":
        return set()
    probe = PairProbe.objects.select_related("node_a", "node_b").get(pk=cmd["probe_id"])
    return {probe.node_a.name, probe.node_b.name}


def in_pass(cmd) -> bool:
    """Whether a command is one of its sweep's confirmation pass."""
    from cluster_health.models import Sweep

    return Sweep.objects.get(pk=cmd["sweep_id"]).params.get("confirm_first") is not None


def result_for(cmd, status="ok", stage=None, reason=None, busbw=2.0, latency=150.0, hint=None, **extra):
    ok = status in ("ok", "degraded")
    out = {
        "v": 1,
        "kind": cmd["kind"],
        "probe_id": cmd["probe_id"],
        "sweep_id": cmd["sweep_id"],
        "node": cmd["node"],
        "rank": cmd["rank"],
        "status": status,
        "stage": stage or (cmd["last_stage"] if ok else "connect"),
        "reason": reason,
        "hint": hint,
        "duration_s": 0.5,
    }
    if ok:
        out.update(
            latency_us_p50=latency,
            latency_us_p99=latency * 2,
            algbw_gbps=busbw,
            busbw_gbps=busbw,
            sizes=[{"bytes": s, "time_us": 10.0, "algbw_gbps": busbw, "busbw_gbps": busbw} for s in cmd["sizes"]],
        )
    out.update(extra)
    return out


class Driver:
    """Runs sweep steps with commands recorded and on_commit callbacks executed."""

    def __init__(self, capture_on_commit):
        self.capture_on_commit = capture_on_commit
        self.commands: list[dict] = []
        self.server_tasks: list[tuple] = []

    def run(self, fn, *args, **kwargs):
        with dispatch.capture() as sent, self.capture_on_commit(execute=True):
            out = fn(*args, **kwargs)
        for task, queue, kw, expires in sent:
            if task == contract.TASK_PROBE:
                assert queue == contract.agent_queue(kw["command"]["node"])
                # No broker expiry: the agent judges the command's age itself (agents.freshness).
                assert expires is None and kw["command"]["expires_at"] and kw["command"]["lifetime_s"]
                self.commands.append(kw["command"])
            else:
                self.server_tasks.append((task, kw))
        return out

    def take(self) -> list[dict]:
        out, self.commands = self.commands, []
        return out

    def sweep(self, **request):
        sweep = self.run(sweeps.request_sweep, source="command", **request)
        self.run(sweeps.start_sweep, sweep.pk)
        return sweep

    def ingest(self, result):
        return self.run(ingest.ingest_result, result)

    def reap(self, now=None):
        return self.run(reaper.reap, now)

    def answer_all(self, answer=None, max_rounds=2000):
        """Answer every outstanding command (ok unless ``answer(cmd)`` returns a result or None to stay silent)."""
        for _ in range(max_rounds):
            pending = self.take()
            if not pending:
                return
            for cmd in pending:
                res = answer(cmd) if answer else result_for(cmd)
                if res is not None:
                    self.ingest(res)
        raise AssertionError("commands kept coming")
