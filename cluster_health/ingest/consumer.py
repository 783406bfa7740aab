"""The ingest consumer: agents' halves and heartbeats taken off the nodes' ingest lists many at a time.

A Celery task per message costs a pool process a message round trip, a key lookup and
Celery's own handling, which held a 256-node fleet near 150 halves a second
(docs/BENCHMARKS.md). Agents send each half as a ``server.result`` task message, and
each heartbeat as a ``server.heartbeat`` one, on their node's own list
``server.ingest.NAME`` (contract.ingest_queue; a node's broker user may append to that
list only), and no Celery worker consumes those lists: every server worker starts one
consumer process beside it (``cluster_health.celery.IngestConsumerStep``), which reads
them directly, a batch at a time:

1. one Lua script first trims every node's list to NODE_CAP messages (keeping the
   oldest; what it drops is counted per node, logged and shown in /metrics), then
   moves up to PER_NODE messages from each list in turn, oldest first, into this
   consumer's ``taken`` list, up to TAKE_MAX in all, and the next batch starts where
   this one stopped: a node that floods its list fills at most PER_NODE of a batch
   and delays no other node's halves or heartbeats. The fleet's old list
   ``server.ingest`` (agents of the previous version, during an upgrade; batches put
   back by ``reclaim_orphans``) is drained in the same batches. When nothing waits it
   looks again every IDLE_S, up to BLOCK_S;
2. each is decoded and its signature checked, with the keys of the whole batch read
   in one query (a heartbeat's nonce too); a message that is unreadable, neither a
   half nor a heartbeat, or forged is kept as a RejectedMessage with the reason and
   never stops the others;
3. the heartbeats that passed are applied in one transaction; the halves are
   applied in one go when no drainer holds any of their shards
   (``buffer.apply_held``: the shards' locks taken at once, the ``taken`` list
   deleted after the commit). Otherwise they move to the ingest buffer's shards and
   the ``taken`` list is deleted, in one Redis transaction, and the buffer's drainer
   (ingest/buffer.py) applies them, BATCH per database transaction. Either way the
   drainer then looks at the buffer for halves others left there.

Nothing is lost when a consumer dies: its ``taken`` list stays, and it is checked
again by the same consumer when its worker restarts (the list is named by the
worker), or put back on the old queue by another consumer or the reaper once the dead
one's lease has lapsed (``reclaim_orphans``). Several consumers share the work: each
take is one script, so no message is taken by two of them; a half checked twice (a
reclaimed batch) is applied once (applying a half is idempotent), and the shard locks
keep two of them (consumers applying their batches, drainers) off the same probe's row.

Run: ``python manage.py ingest_consumer --name WORKER`` (the worker's bootstep runs it as
``python -m django ingest_consumer``).
"""

from __future__ import annotations

import logging
import os
import random
import signal
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import redis
from django.conf import settings
from django.db import InterfaceError, OperationalError, close_old_connections

from agents import contract, signing
from agents.hangs import contract as hangs_contract
from cluster_health.ingest import buffer
from cluster_health.ingest.auth import authenticate, first_uses, remember_nonces
from cluster_health.ingest.inspections import record_report
from cluster_health.ingest.rejects import reject
from cluster_health.queues import keys
from cluster_health.queues.keys import CONSUMERS, lease_key, registered, shard_of, taken_key
from cluster_health.queues.messages import decode
from cluster_health.shapes import broadcast

log = logging.getLogger(__name__)

TAKE_MAX = 1000  # messages per batch: a 1,024-node round's halves in one batch
PER_NODE = 64  # messages of one node's list per batch: a node that floods its list fills this much of one
BLOCK_S = 1.0  # an idle consumer waits this long for a message before it looks around again
IDLE_S = 0.01  # how often an idle consumer looks at the lists meanwhile
# How often it looks for lists of nodes it has not seen yet (a SCAN of the keyspace): while busy, and while idle.
DISCOVER_S, DISCOVER_IDLE_S = 1.0, 0.2
LEASE_S = 30.0  # a consumer not heard of for this long is dead, and its batch goes back on the queue
RECLAIM_EVERY_S = 10.0  # how often a live consumer binds its queue again and looks for a dead one's batch
RETRY_S = 1.0  # after Redis or the database failed, the batch waits this long before it is tried again
# What may fail a whole batch (it is taken again): the database or Redis out of reach. Anything else
# one message raises is that message's (``_one_message``).
TRANSIENT = (OperationalError, InterfaceError, redis.ConnectionError, redis.TimeoutError)
# What the queue carries: task name -> the argument that holds the message's body.
CARRIED = {
    contract.TASK_RESULT: "result",
    contract.TASK_HEARTBEAT: "heartbeat",
    hangs_contract.TASK_INSPECTION: "inspection",  # a node's view of a hung job (agents.hangs)
}
# A batch: what this consumer's last life left in ``taken`` first, then, after every node's list is
# trimmed to its cap, the oldest messages of each list in turn (Celery's Redis transport pushes on the
# left and pops on the right), up to ARGV[2] of one list and ARGV[1] in all. The old fleet-wide list gets
# up to half the batch first and what is left at the end. KEYS: taken, the dropped counts, the old
# list, then the nodes' lists in this batch's order; ARGV: batch size, per list, cap, the lists' prefix
# length. Returns {batch, {node, dropped, ...}, how many nodes' lists were served before the batch was full
# (0: it was not)}.
TAKE_SCRIPT = (
    keys.TRIM_LUA
    + """
local dropped = trim(KEYS[2], 4, #KEYS, tonumber(ARGV[3]), tonumber(ARGV[4]))
local batch = redis.call('LRANGE', KEYS[1], 0, -1)
local room = tonumber(ARGV[1]) - #batch
local per = tonumber(ARGV[2])
local function take(key, want)
  if want <= 0 then return 0 end
  local fresh = redis.call('LRANGE', key, -want, -1)
  if #fresh == 0 then return 0 end
  redis.call('LTRIM', key, 0, -(#fresh + 1))
  for i = #fresh, 1, -500 do
    local chunk = {}
    for j = i, math.max(1, i - 499), -1 do chunk[#chunk + 1] = fresh[j] end
    redis.call('RPUSH', KEYS[1], unpack(chunk))
    for _, raw in ipairs(chunk) do batch[#batch + 1] = raw end
  end
  return #fresh
end
room = room - take(KEYS[3], math.floor(room / 2))
local served = 0
for k = 4, #KEYS do
  if room <= 0 then break end
  room = room - take(KEYS[k], math.min(per, room))
  if room <= 0 then served = k - 3 end
end
room = room - take(KEYS[3], room)
return {batch, dropped, served}
"""
)

# A dead consumer's batch back on the queue, oldest end (taken next). KEYS: its taken list, its
# lease, the queue, the registry; ARGV: its name. Nothing while its lease lives.
RECLAIM_SCRIPT = """
if redis.call('EXISTS', KEYS[2]) == 1 then return -1 end
local left = redis.call('LRANGE', KEYS[1], 0, -1)
for i = 1, #left, 500 do
  redis.call('RPUSH', KEYS[3], unpack(left, i, math.min(i + 499, #left)))
end
redis.call('DEL', KEYS[1])
redis.call('SREM', KEYS[4], ARGV[1])
return #left
"""


def declare_queue() -> None:
    """Bind queue server.ingest as Celery declares a queue it sends to, so that no half sent before
    any agent declared it is dropped for want of a binding (the Redis transport routes by bindings)."""
    from cluster_health.celery import app

    with app.connection_for_write() as conn:
        app.amqp.queues[contract.INGEST_QUEUE].bind(conn.default_channel).declare()


def _client() -> redis.Redis:
    from agents import broker

    client: redis.Redis = broker.redis_client(settings.REDIS_URL, socket_connect_timeout=5, socket_timeout=BLOCK_S + 30)
    return client


class Consumer:
    """One consumer, named by its worker: takes, checks and buffers batches, then drains the buffer."""

    def __init__(self, name: str, client: redis.Redis | None = None):
        self.name, self.client = name, client or _client()
        self.taken, self.lease = taken_key(name), lease_key(name)
        self.token = uuid.uuid4().hex
        self.reclaimed_at = self.discovered_at = self.took_at = 0.0
        self.lists: list[str] = []  # nodes' ingest lists seen so far (a drained list is no key until it fills)
        self.cursor = random.randrange(1 << 30)  # where the next batch starts among them: consumers start apart
        self.take_script = self.client.register_script(TAKE_SCRIPT)

    def alive(self) -> None:
        """Renew the lease (it outlives a batch by far) and stay on the registry."""
        pipe = self.client.pipeline(transaction=False)
        pipe.set(self.lease, self.token, px=int(LEASE_S * 1000))
        pipe.sadd(CONSUMERS, self.name)
        pipe.execute()

    def step(self, block_s: float = BLOCK_S) -> int:
        """Take one batch, check it and apply it; returns the messages taken (0: none came within ``block_s``)."""
        self.alive()
        if time.monotonic() - self.reclaimed_at > RECLAIM_EVERY_S:
            self.reclaimed_at = time.monotonic()
            declare_queue()  # again: a broker restarted without its data has lost the binding
            reclaim_orphans(self.client, but=self.name)
        batch = self.take()
        waited_until = time.monotonic() + block_s
        while not batch and time.monotonic() < waited_until:
            time.sleep(IDLE_S if time.monotonic() - self.took_at < 1.0 else 5 * IDLE_S)
            batch = self.take()
        if not batch:
            return 0
        inspections: list = []
        halves, beats = checked(batch, inspections)
        for report in inspections:  # rare and small: one per node and diagnosis
            with _one_message(report):
                record_report(report)
        if beats:
            apply_heartbeats(beats)  # before the batch is let go: a failure leaves it to be taken again
        if not (halves and buffer.apply_held(self.client, halves, done=self.taken)):
            buffer.append_halves(self.client, halves, done=self.taken)
        log.info("took %d messages: %d halves and %d heartbeats checked", len(batch), len(halves), len(beats))
        buffer.Drainer(self.client, self.name).run(first=shard_of(halves[0]) if halves else 0)
        return len(batch)

    def take(self) -> list:
        """The next batch (see TAKE_SCRIPT), this consumer's ``taken`` list holding it; every node's list trimmed first."""
        now = time.monotonic()
        if now - self.discovered_at > (DISCOVER_S if now - self.took_at < DISCOVER_S else DISCOVER_IDLE_S):
            self.discovered_at = now
            self.lists = sorted(set(self.lists).union(keys.node_lists(self.client)))
        start = self.cursor % len(self.lists) if self.lists else 0
        order = self.lists[start:] + self.lists[:start]
        script_keys = [self.taken, keys.DROPPED, contract.INGEST_QUEUE, *order]
        batch, dropped, served = self.take_script(
            keys=script_keys, args=[TAKE_MAX, PER_NODE, keys.NODE_CAP, len(contract.INGEST_QUEUE_PREFIX)]
        )
        self.cursor = start + int(served)
        log_dropped(dropped, "ingest consumer " + self.name)
        if batch:
            self.took_at = now
        return batch

    def run(self, stopping: threading.Event) -> None:
        """Until ``stopping`` is set (a batch in hand is finished first); Redis or database trouble waits and retries."""
        log.info("ingest consumer %s taking the nodes' ingest lists and %s", self.name, contract.INGEST_QUEUE)
        with broadcast.holding():  # browsers are told when no message waits, one update per sweep
            while not stopping.is_set():
                try:
                    since = broadcast.held_since()
                    if not self.step(block_s=BLOCK_S if since is None else 0) or (
                        since is not None and time.monotonic() - since > broadcast.HOLD_S
                    ):
                        broadcast.flush()
                except Exception:  # the batch stays in ``taken``, and is taken first next time
                    log.exception("ingest consumer %s: batch not applied; trying again in %.0fs", self.name, RETRY_S)
                    stopping.wait(RETRY_S)
                    close_old_connections()  # a connection the failure broke is replaced
        self.client.delete(self.lease)  # its batch, if any, is this worker's to finish when it returns
        log.info("ingest consumer %s stopped", self.name)


def log_dropped(dropped: list, who: str) -> None:
    """A warning naming each node whose ingest list was over its cap, and how many of its messages were dropped."""
    for i in range(0, len(dropped) - 1, 2):
        node = dropped[i].decode(errors="replace") if isinstance(dropped[i], bytes) else str(dropped[i])
        log.warning(
            "%s: node %s sent past its ingest list's cap of %d: %d of its newest messages dropped",
            who,
            node,
            keys.NODE_CAP,
            int(dropped[i + 1]),
        )


def checked(batch: list, inspections: list | None = None) -> tuple[list, list]:
    """(halves, heartbeats) of a batch: the messages that are readable, a half or a heartbeat, and
    signed by their node's current key. A heartbeat comes with its signature (for its nonce).

    Every other message is recorded as rejected (with the reason) and dropped from the batch; an
    expired heartbeat (its agent sent a newer one since) is dropped quietly, as Celery drops it.
    One message that breaks a check in a way nobody foresaw is that message's loss, never the
    batch's: a batch that raised would be taken again, and again, and hold up all ingest.
    Only a database or Redis connection failing leaves the batch to be retried (TRANSIENT).
    Nodes' reports of a hung job that check out are added to ``inspections``.
    """
    from cluster_health.models import AgentKey

    readable: list[tuple[str, Any, Any]] = []
    for raw in batch:
        with _one_message(raw):
            found = _readable(raw)
            if found is not None:
                readable.append(found)
    # Only well-formed envelopes ask for a key: a node name that is not one (a lone surrogate, say)
    # must not reach the key query, where it would fail the whole batch's.
    wanted = {(auth["node"], auth["kid"]) for _, _, auth in readable if signing.well_formed(auth)}
    keys = AgentKey.secrets_for(wanted) if wanted else {}

    def secret_for(node: str, kid: str) -> bytes | None:
        return keys.get((node, kid))

    halves: list[tuple[object, object]] = []
    beats: list[tuple[object, object]] = []
    for task, body, auth in readable:
        with _one_message(body):
            if authenticate(task, CARRIED[task], body, auth, secret_for=secret_for) is not None:
                continue
            if task == hangs_contract.TASK_INSPECTION:
                if inspections is not None:
                    inspections.append(body)
            else:
                (halves if task == contract.TASK_RESULT else beats).append((body, auth))
    return [body for body, _ in halves], first_uses(contract.TASK_HEARTBEAT, beats) if beats else []


def _readable(raw) -> tuple[str, Any, Any] | None:
    """(task, body, auth) of a message the consumer carries; None when it was rejected or has expired."""
    try:
        task, kwargs, expired = decode(raw)
    except ValueError as exc:
        reject(contract.TASK_RESULT, _shown(raw), f"{contract.INGEST_QUEUE}: {exc}")
        return None
    if task not in CARRIED:
        reject(
            contract.TASK_RESULT,
            kwargs,
            f"{contract.INGEST_QUEUE}: carries {', '.join(CARRIED)} messages only, not {contract.shown(task)}",
        )
        return None
    if expired:
        log.info("%s past its expiry dropped", task)
        return None
    return task, kwargs.get(CARRIED[task]), kwargs.get("auth")


@contextmanager
def _one_message(message) -> Iterator[None]:
    """Checks of one message: an unforeseen error rejects that message (or, failing that, drops it
    with a log line); the database or Redis failing is raised, so the batch is taken again."""
    try:
        yield
    except TRANSIENT:
        raise
    except Exception as exc:
        log.exception("ingest consumer: a message broke its checks; rejected")
        try:
            reject(contract.TASK_RESULT, _shown(message), f"{contract.INGEST_QUEUE}: unreadable ({type(exc).__name__})")
        except TRANSIENT:
            raise
        except Exception:
            log.exception("ingest consumer: the message could not even be recorded; dropped")


def apply_heartbeats(beats: list) -> None:
    """Apply checked heartbeats in one transaction, then mark their nonces used (as the heartbeat task does).

    All of them in one statement; if the database refuses it, one at a time, so that a
    heartbeat it refuses is that one's loss.
    """
    from django.db import DataError, IntegrityError, transaction

    from cluster_health.ingest.heartbeats import record_heartbeat, record_heartbeats

    with transaction.atomic():
        try:
            with transaction.atomic():
                record_heartbeats([heartbeat for heartbeat, _ in beats])
        except (DataError, IntegrityError):
            log.warning("a batch of %d heartbeats was refused; applying them one at a time", len(beats), exc_info=True)
            for heartbeat, _ in beats:
                try:
                    with transaction.atomic():
                        record_heartbeat(heartbeat)
                except (DataError, IntegrityError) as exc:
                    reject(contract.TASK_HEARTBEAT, heartbeat, f"heartbeat: refused by the database: {exc}")
    remember_nonces([auth for _, auth in beats])


def _shown(raw) -> str:
    """An unreadable message as text for its RejectedMessage row (bounded, valid text)."""
    if not isinstance(raw, (bytes, str)):
        raw = repr(raw)
    raw = raw[:4000]
    return raw.decode("utf-8", errors="replace") if isinstance(raw, bytes) else str(raw)


def reclaim_orphans(client: redis.Redis | None = None, but: str | None = None) -> int:
    """Put the batches of consumers whose lease lapsed back on the queue; returns the messages put back."""
    own = client is None
    client = client or _client()
    back = 0
    try:
        for name in registered(client):
            if name == but:
                continue
            its = (taken_key(name), lease_key(name), contract.INGEST_QUEUE, CONSUMERS)
            moved = client.eval(RECLAIM_SCRIPT, len(its), *its, name)
            if moved > 0:
                log.warning("ingest consumer %s is gone: %d messages of its batch put back on the queue", name, moved)
                back += moved
    except redis.RedisError:
        if not own:
            raise
        log.warning("ingest queue unreachable; a dead consumer's batch is looked for next time", exc_info=True)
    finally:
        if own:
            client.close()
    return back


def _die_with_parent(parent: int) -> None:
    """Linux: SIGTERM when the worker that started this process dies, however it dies."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass
    if parent and os.getppid() != parent:  # the worker died before the line above
        sys.exit(0)


def serve(name: str, parent: int = 0) -> None:
    """The consumer process's life (``manage.py ingest_consumer``): until SIGTERM or SIGINT, or its worker is gone."""
    _die_with_parent(parent)
    from django.db import connections

    for alias in connections:  # a long-lived process keeps its connection, as the workers' pool processes do
        connections.settings[alias]["CONN_MAX_AGE"] = settings.WORKER_DB_CONN_MAX_AGE
        connections.settings[alias]["CONN_HEALTH_CHECKS"] = True
    stopping = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stopping.set())
    try:
        Consumer(name).run(stopping)
    finally:
        connections.close_all()
