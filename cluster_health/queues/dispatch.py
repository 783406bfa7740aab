"""The one module that sends tasks: probe commands to agents' queues, sweep steps to the server queue.

Commands are built here and checked with ``contract.validate_command`` before they
leave, so a command the agent would refuse never goes out, and each is signed with
its node's enrolled key (agents refuse unsigned commands). Tests and benchmarks
swap the sender with ``capture()`` instead of patching Celery.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import hmac
import logging
import os
import socket
import time
import uuid
from collections.abc import Callable
from contextlib import contextmanager
from datetime import UTC, datetime

from agents import contract, gpu_contract, signing
from cluster_health import jsontext, shared_redis, vocabulary

log = logging.getLogger(__name__)

# Slack for queueing and process start between sending a command and the probe running.
START_GRACE_S = 10.0
# Extra time for the result to travel back before the reaper calls the probe silent.
REPORT_GRACE_S = 5.0

Message = tuple[str, str, dict, float | None]  # task, queue, kwargs, expires_s
Sender = Callable[[list[Message]], None]
# Messages buffered in one Redis pipeline: a round at 1,024 nodes is 1,024 commands, and one
# round trip each was most of a round's overhead.
PUBLISH_BATCH = 1000
_HOSTNAME = socket.gethostname()


# What Celery's protocol 2 puts beside a task's arguments: no callbacks, errbacks, chain or chord.
_EMBED = {"callbacks": None, "errbacks": None, "chain": None, "chord": None}
# Celery names a client's reply queue once per process (a oid); nothing replies to ours.
_REPLY_TO = str(uuid.uuid4())


def task_message(task: str, queue: str, kwargs: dict, expires_s: float | None, *, now: float | None = None) -> str:
    """A task message as ``app.send_task`` writes it (Celery's protocol 2, JSON) and its Redis transport
    stores it: the text pushed onto the queue's list, built here without Celery's per-message machinery.

    Celery's ``send_task`` spent about 0.5 ms of the sender's CPU a message (its options,
    amqp message, kombu Message and two JSON passes), and a 256-node round is 256
    commands: a third of the ingest consumer's time went there. The message is the same,
    field for field, as ``send_task`` writes (tests/queues/test_dispatch_wire.py compares them; the JSON is
    written compact, by orjson, where Celery puts spaces), so agents' Celery workers and the server's read it
    as they read Celery's own.
    """
    task_id = str(uuid.uuid4())
    body = jsontext.dumps([[], kwargs, _EMBED]).encode()
    expires = None
    if expires_s is not None:
        at = datetime.fromtimestamp((time.time() if now is None else now) + expires_s, UTC)
        expires = at.isoformat()
    shown = _repr(kwargs)
    headers: dict = {
        "lang": "py",
        "task": task,
        "id": task_id,
        "shadow": None,
        "eta": None,
        "expires": expires,
        "group": None,
        "group_index": None,
        "retries": 0,
        "timelimit": [None, None],
        "root_id": task_id,
        "parent_id": None,
        "argsrepr": "()",
        "kwargsrepr": shown,
        "origin": f"gen{os.getpid()}@{_HOSTNAME}",
        "ignore_result": None,
        "replaced_task_nesting": 0,
        "stamped_headers": None,
        "stamps": {},
    }
    properties: dict = {
        "correlation_id": task_id,
        "reply_to": _REPLY_TO,
        "argsrepr": "()",
        "kwargsrepr": shown,
        "delivery_mode": 2,
    }
    if expires_s is not None:
        properties["expiration"] = str(int(expires_s * 1000))
    properties.update(
        delivery_info={"exchange": "", "routing_key": queue},
        priority=0,
        body_encoding="base64",
        delivery_tag=str(uuid.uuid4()),
    )
    return jsontext.dumps(
        {
            "body": base64.b64encode(body).decode(),
            "content-encoding": "utf-8",
            "content-type": "application/json",
            "headers": headers,
            "properties": properties,
        }
    )


def _redis_send(messages: list[Message]) -> None:
    """Push each message onto its queue's list, PUBLISH_BATCH to a Redis round trip.

    Queues are named as Celery publishes to them through the default (anonymous) exchange:
    the message goes onto the queue's own list, with no binding to look up, so it waits
    there also when the broker restarted and lost its bindings. A broker away raises
    ``redis.RedisError``; the rows of a round stay unsent and the reaper sends them
    again (sweeps/outbox.py).
    """
    client = shared_redis.client()
    now = time.time()
    for start in range(0, len(messages), PUBLISH_BATCH):
        pipe = client.pipeline(transaction=False)
        for task, queue, kwargs, expires_s in messages[start : start + PUBLISH_BATCH]:
            pipe.lpush(queue, task_message(task, queue, kwargs, expires_s, now=now))
        pipe.execute()


def _repr(kwargs: dict) -> str:
    """What Celery's logs show of a message: the probe or node its first argument (a command, a half) is about."""
    inner = next(iter(kwargs.values()), None)
    if isinstance(inner, dict):
        return "{" + ", ".join(f"{k}={inner[k]}" for k in ("probe_id", "node", "rank") if k in inner) + "}"
    return repr(kwargs)[:200]


_sender: Sender = _redis_send


@contextmanager
def using(sender: Sender):
    """Send with ``sender`` instead, inside the block (tests record, benchmarks compare senders)."""
    global _sender
    previous, _sender = _sender, sender
    try:
        yield
    finally:
        _sender = previous


@contextmanager
def capture():
    """Record sends as (task, queue, kwargs, expires_s) tuples instead of sending them."""
    sent: list[Message] = []
    with using(sent.extend):
        yield sent


def send_to_server(task: str, **kwargs) -> None:
    _sender([(task, vocabulary.SERVER_QUEUE, kwargs, None)])


def send_command(command: dict) -> None:
    """Send one probe command to its node's queue; it expires if not started in time."""
    send_commands([command])


def send_commands(commands: list[dict]) -> None:
    """Sign each command with its node's current key (one query for all) and send them in one go.

    Each expires if not started within its lifetime (the agent judges it, agents.freshness). A node
    without a key gets the command
    unsigned: an agent that runs with a key refuses it, and only a development agent
    (no key, unsigned allowed) runs it.
    """
    from cluster_health.models import AgentKey

    keys = AgentKey.active_keys({c["node"] for c in commands})
    now = time.time()
    unsigned = sorted({c["node"] for c in commands} - keys.keys())
    if unsigned:
        log.warning(
            "no enrolled key for %d node(s) (%s): their commands go out unsigned",
            len(unsigned),
            ", ".join(unsigned[:5]),
        )
    messages: list[Message] = []
    for command in commands:
        key = keys.get(command["node"])
        kwargs: dict = {"command": command}
        if key is not None:
            kwargs["auth"] = signing.sign(command, key, "command", now=now)
        # No Celery expiry: the agent's worker would judge it by the node's clock alone; the agent
        # judges expires_at and lifetime_s itself, whatever the clocks' offset (agents.freshness).
        messages.append((contract.TASK_PROBE, contract.agent_queue(command["node"]), kwargs, None))
    _sender(messages)


def send_probe_commands(model, pks: list[int], commands: list[dict]) -> None:
    """Send the commands of these probe rows (after their round's commit), then mark the rows sent.

    A worker killed before the mark leaves them unsent; the reaper sends them again
    (``sweeps.outbox``), and agents drop a command they already ran.
    """
    from django.utils import timezone

    if commands:
        send_commands(commands)
    model.objects.filter(pk__in=pks, sent_at__isnull=True).update(sent_at=timezone.now())


def new_rendezvous() -> str:
    return uuid.uuid4().hex


def rendezvous_key(rendezvous: str) -> str:
    """The secret a probe's ranks sign their rendezvous values with: derived from SECRET_KEY and the
    probe's rendezvous id (the same when the outbox builds the commands again), sent in both ranks'
    commands, which only those two nodes' broker users can read."""
    from django.conf import settings

    return hmac.new(_rendezvous_base(settings.SECRET_KEY), rendezvous.encode(), hashlib.sha256).hexdigest()[:32]


@functools.lru_cache(maxsize=4)
def _rendezvous_base(secret_key: str) -> bytes:
    return hmac.new(secret_key.encode(), b"cluster-health rendezvous v1", hashlib.sha256).digest()


def probe_settings(params: dict, last_stage: str, kind: str = "pair") -> dict:
    """The command fields that come from the sweep's parameters (already bounded at request time)."""
    timeouts = contract.validate_timeouts(params.get("timeouts"))
    deadline = contract.default_deadline(timeouts)
    if kind == "discover":
        # Discovery spends up to one attempt per interface combination where a pair spends one init.
        deadline = deadline - timeouts["init"] + contract.discover_budget_s(timeouts["init"])
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


def build_commands(
    sweep,
    kind: str,
    probe,
    members: list[tuple[str, str]],
    settings: dict,
    *,
    master_port: int | None = None,
    env: dict | None = None,
) -> list[dict]:
    """The commands of one probe row of a sweep: one per member (name, address); rank = position, rank 0 hosts the store.

    settings: probe_settings(); the backend and multi_group come from the sweep's row, the rendezvous
    from the probe's. master_port and env: what a rehearsed job's launch sets.
    """
    expires_at = time.time() + START_GRACE_S
    peers = [{"name": n, "address": a} for n, a in members]
    commands = []
    for rank, (name, address) in enumerate(members):
        cmd = {
            "v": contract.VERSION,
            "kind": kind,
            "probe_id": probe.pk,
            "sweep_id": sweep.pk,
            "rendezvous": probe.rendezvous,
            "rendezvous_key": rendezvous_key(probe.rendezvous),
            "node": name,
            "rank": rank,
            "world_size": len(members),
            "backend": sweep.backend,
            "bind_address": address,
            "master_address": members[0][1],
            "peers": [p for p in peers if p["name"] != name],  # in rank order: contract.master_node reads it
            "expires_at": expires_at,
            "lifetime_s": START_GRACE_S,
            "multi_group": bool(sweep.params.get("multi_group")),
            **settings,
        }
        if master_port is not None:
            cmd["master_port"] = master_port
        if env:
            cmd["env"] = env
        commands.append(contract.validate_command(cmd))
    return commands


def build_gpu_command(probe_id: int, sweep_id: int, node: str, params: dict, gpus: int = 8) -> dict:
    """The command of one node's gpu check (agents/gpu_contract.py): no peer, no rendezvous.

    params: the sweep's (bounded at request time: an explicit ``deadline_s``); ``gpus``: how many GPUs
    the node's facts list, which sizes the default deadline (the per-GPU stages run once per GPU).
    """
    timeouts = dict(gpu_contract.DEFAULT_TIMEOUTS)
    cmd: dict = {
        "v": contract.VERSION,
        "kind": gpu_contract.KIND,
        "probe_id": probe_id,
        "sweep_id": sweep_id,
        "node": node,
        "timeouts": timeouts,
        "deadline_s": float(params.get("deadline_s") or gpu_contract.default_deadline(timeouts, max(1, gpus))),
        "expires_at": time.time() + START_GRACE_S,
        "lifetime_s": START_GRACE_S,
    }
    return gpu_contract.validate_command(cmd)
