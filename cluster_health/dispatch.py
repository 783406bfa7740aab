"""The one module that sends tasks: probe commands to agents' queues, sweep steps to the server queue.

Commands are built here and checked with ``contract.validate_command`` before they
leave, so a command the agent would refuse never goes out. Tests and benchmarks
swap the sender with ``capture()`` instead of patching Celery.
"""

from __future__ import annotations

import time
import uuid
from contextlib import contextmanager
from typing import Callable

from agents import contract
from agents.probe import discover_budget_s

# Slack for queueing and process start between sending a command and the probe running.
START_GRACE_S = 10.0
# Extra time for the result to travel back before the reaper calls the probe silent.
REPORT_GRACE_S = 5.0

Sender = Callable[[str, str, dict, float | None], None]


def _celery_send(task: str, queue: str, kwargs: dict, expires_s: float | None) -> None:
    from cluster_health.celery import app

    with app.producer_or_acquire() as producer:
        # Redis keeps queue bindings in memory only: after a broker restart, a command sent
        # before its agent re-declared its queue would be routed nowhere and lost. Declaring
        # the queue on every send (idempotent) keeps the command waiting in it instead.
        app.amqp.queues[queue](producer.channel).declare()
        app.send_task(task, kwargs=kwargs, queue=queue, expires=expires_s, producer=producer)


_sender: Sender = _celery_send


@contextmanager
def capture():
    """Record sends as (task, queue, kwargs, expires_s) tuples instead of sending them."""
    global _sender
    sent: list[tuple] = []
    previous, _sender = _sender, (lambda *args: sent.append(args))
    try:
        yield sent
    finally:
        _sender = previous


def send_to_server(task: str, **kwargs) -> None:
    _sender(task, contract.SERVER_QUEUE, kwargs, None)


def send_command(command: dict) -> None:
    """Send one probe command to its node's queue; it expires if not started in time."""
    expires_s = min(command["deadline_s"], START_GRACE_S)
    _sender(contract.TASK_PROBE, contract.agent_queue(command["node"]), {"command": command}, expires_s)


def new_rendezvous() -> str:
    return uuid.uuid4().hex


def probe_settings(params: dict, last_stage: str, kind: str = "pair") -> dict:
    """The command fields that come from the sweep's parameters (already bounded at request time)."""
    timeouts = contract.validate_timeouts(params.get("timeouts"))
    deadline = contract.default_deadline(timeouts)
    if kind == "discover":
        # Discovery spends up to one attempt per interface combination where a pair spends one init.
        deadline = deadline - timeouts["init"] + discover_budget_s(timeouts["init"])
    out = {
        "last_stage": last_stage,
        "sizes": list(params.get("sizes") or contract.DEFAULT_SIZES),
        "iterations": params.get("iterations", contract.DEFAULT_ITERATIONS),
        "warmup": params.get("warmup", contract.DEFAULT_WARMUP),
        "latency_iterations": params.get("latency_iterations", contract.DEFAULT_LATENCY_ITERATIONS),
        "timeouts": timeouts,
        "deadline_s": float(params.get("deadline_s") or deadline),
    }
    if last_stage == "collective":
        out["sizes"] = out["sizes"][:1]
    return out


def server_deadline_s(command_deadline_s: float) -> float:
    """How long the server waits for results of a command before the reaper closes the probe."""
    return START_GRACE_S + command_deadline_s + REPORT_GRACE_S


def build_commands(*, kind: str, probe_id: int, sweep_id: int, backend: str, members: list[tuple[str, str]],
                   settings: dict, rendezvous: str, master_port: int | None = None,
                   env: dict | None = None, multi_group: bool = False) -> list[dict]:
    """One command per member (name, address); rank = position, rank 0 hosts the store."""
    expires_at = time.time() + START_GRACE_S
    peers = [{"name": n, "address": a} for n, a in members]
    commands = []
    for rank, (name, address) in enumerate(members):
        cmd = {
            "v": contract.VERSION, "kind": kind, "probe_id": probe_id, "sweep_id": sweep_id,
            "rendezvous": rendezvous, "node": name, "rank": rank, "world_size": len(members),
            "backend": backend, "bind_address": address, "master_address": members[0][1],
            "peers": [p for p in peers if p["name"] != name], "expires_at": expires_at,
            "multi_group": multi_group, **settings,
        }
        if master_port is not None:
            cmd["master_port"] = master_port
        if env:
            cmd["env"] = env
        commands.append(contract.validate_command(cmd))
    return commands
