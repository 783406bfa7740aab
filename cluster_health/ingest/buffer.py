"""The ingest buffer: checked halves waiting in Redis, applied BATCH at a time by one drainer per worker.

One transaction per half caps ingest at about 150 halves/s, so halves are applied
in batches. The ingest consumer (ingest/consumer.py), which agents' halves take on
queue ``server.ingest``, applies each checked batch itself when no drainer holds its
shards (``apply_held``, under the same shard locks) and otherwise appends it at once
(``append_halves``); a ``server.result`` task on queue ``server`` (older agents, tools)
appends its one half (``buffer_result``). Either then drains, unless another process of
the same worker holds the worker's drainer slot: one process per worker applies
halves, BATCH per ``ingest_results`` call (one transaction), while the worker's other
processes keep taking messages. At low load the process that appended is the one
that drains, so a half reaches the database (and the browsers) at once.

Nothing is lost or applied twice when a worker dies mid-batch: a batch is moved to
the shard's processing list before it is applied and removed only after the commit,
so the next drainer (the next batch's, or the reaper's ``drain_all`` once the dead
drainer's lock expires) applies it again, and applying a half twice changes nothing
(every write is conditional). Halves are sharded by probe, so both halves of a pair
meet in one batch, and the drainers of several workers drain different shards at
the same time.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import uuid

import redis
from django.conf import settings

from agents import broker, contract
from cluster_health.ingest import results
from cluster_health.ingest.rejects import reject
from cluster_health.queues.keys import (
    SHARDS,
    lock_key,
    pending_key,
    processing_key,
    seal_key,
    sealed,
    shard_of,
    slot_key,
    unsealed,
)

log = logging.getLogger(__name__)

BATCH = results.BATCH
BUFFERED = "buffered"  # the outcome of a half appended for the drainer


# The next batch: a dead drainer's batch first (it may or may not have been committed, and
# applying it again is harmless), else up to ARGV[1] halves moved from pending to processing.
# KEYS: pending, processing, lock; ARGV: batch size, the drainer's lock token.
TAKE_SCRIPT = """
if redis.call('GET', KEYS[3]) ~= ARGV[2] then return false end
local left = redis.call('LRANGE', KEYS[2], 0, -1)
if #left > 0 then return left end
local batch = redis.call('LRANGE', KEYS[1], 0, tonumber(ARGV[1]) - 1)
if #batch == 0 then return batch end
redis.call('LTRIM', KEYS[1], #batch, -1)
for i = 1, #batch, 500 do
  redis.call('RPUSH', KEYS[2], unpack(batch, i, math.min(i + 499, #batch)))
end
return batch
"""

# After the commit: the batch is done, and the shard's lock and the worker's slot are held for
# another one. A drainer that lost its lock (it outlived the lock's lifetime) leaves the batch
# for the lock's new owner. KEYS: processing, lock, slot; ARGV: the drainer's token, lifetime in ms.
DONE_SCRIPT = """
if redis.call('GET', KEYS[2]) ~= ARGV[1] then return 0 end
redis.call('DEL', KEYS[1])
redis.call('PEXPIRE', KEYS[2], ARGV[2])
if redis.call('GET', KEYS[3]) == ARGV[1] then redis.call('PEXPIRE', KEYS[3], ARGV[2]) end
return 1
"""

RELEASE_SCRIPT = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""

# Every shard's lock at once, or none (those taken are let go). KEYS: the locks; ARGV: token, lifetime in ms.
LOCK_ALL_SCRIPT = """
for i, key in ipairs(KEYS) do
  if not redis.call('SET', key, ARGV[1], 'NX', 'PX', ARGV[2]) then
    for j = 1, i - 1 do redis.call('DEL', KEYS[j]) end
    return 0
  end
end
return 1
"""

# The locks still this token's let go. KEYS: the locks; ARGV: the token.
RELEASE_ALL_SCRIPT = """
for _, key in ipairs(KEYS) do
  if redis.call('GET', key) == ARGV[1] then redis.call('DEL', key) end
end
return 1
"""

# After a batch applied under LOCK_ALL_SCRIPT: the list it was held in deleted, then RELEASE_ALL_SCRIPT.
# KEYS: the list, then the locks; ARGV: the token.
DONE_ALL_SCRIPT = "redis.call('DEL', table.remove(KEYS, 1))\n" + RELEASE_ALL_SCRIPT


def _client() -> redis.Redis:
    client: redis.Redis = broker.redis_client(settings.REDIS_URL, socket_connect_timeout=5, socket_timeout=30)
    return client


def _seal_key() -> bytes:
    return seal_key(settings.SECRET_KEY)


def _shown(raw: str | bytes) -> str:
    return raw[:4000].decode("utf-8", errors="replace") if isinstance(raw, bytes) else raw[:4000]


def _lock_ms() -> int:
    return int(settings.INGEST_DRAIN_LOCK_S * 1000)


def this_process() -> str:
    """The drainer slot's name outside a Celery worker: one slot per process."""
    return f"{socket.gethostname()}:{os.getpid()}"


def buffer_result(payload, worker: str | None = None) -> str:
    """Append one half for the drainer, and drain if ``worker`` (its Celery hostname) has no drainer running.

    Raises when Redis cannot be reached, so that the task's message stays unacked and
    is delivered again: the half is only acknowledged once it is in the buffer.
    """
    try:
        encoded = json.dumps(payload)
    except (TypeError, ValueError, RecursionError) as exc:  # only in-process callers can build such a value
        return reject(contract.TASK_RESULT, payload, f"result: not a JSON value ({type(exc).__name__})")
    shard = shard_of(payload)
    client = _client()
    try:
        client.rpush(pending_key(shard), sealed(encoded, _seal_key()))
        try:
            Drainer(client, worker or this_process()).run(first=shard)
        except Exception:  # the half is safe in the buffer: the next drainer or the reaper applies it
            log.exception("draining the ingest buffer failed; left for the next drainer")
    finally:
        client.close()
    return BUFFERED


def append_halves(client: redis.Redis, halves: list, done: str | None = None) -> None:
    """Append checked halves to their shards and, in the same transaction, delete the list ``done``
    they were held in (the ingest consumer's batch): a half is in exactly one place at any time."""
    by_shard: dict[int, list[str]] = {}
    key = _seal_key()
    for half in halves:
        by_shard.setdefault(shard_of(half), []).append(sealed(json.dumps(half), key))
    pipe = client.pipeline(transaction=True)
    for shard, encoded in by_shard.items():
        pipe.rpush(pending_key(shard), *encoded)
    if done is not None:
        pipe.delete(done)
    pipe.execute()


def apply_held(client: redis.Redis, halves: list, done: str) -> bool:
    """Apply checked halves now, in one go, if no drainer holds any of their shards; False (nothing done) if one does.

    The ingest consumer's way past the buffer: its batch stays in the list ``done`` (its
    ``taken`` list) until the halves are committed, and is deleted then, so a consumer
    that dies mid-batch leaves it to be checked and applied again, as a dead drainer
    leaves its processing list (applying a half twice changes nothing). The shards' locks
    keep the drainers of other workers off these probes' rows meanwhile, as a drainer's do.
    """
    locks = [lock_key(shard) for shard in sorted({shard_of(half) for half in halves})]
    token = uuid.uuid4().hex
    if not client.eval(LOCK_ALL_SCRIPT, len(locks), *locks, token, _lock_ms()):
        return False
    try:
        results.ingest_results(halves)
    except BaseException:
        client.eval(RELEASE_ALL_SCRIPT, len(locks), *locks, token)
        raise
    client.eval(DONE_ALL_SCRIPT, 1 + len(locks), done, *locks, token)
    log.info("ingested %d halves (shards %s)", len(halves), ",".join(key.split(":")[-2] for key in locks))
    return True


def drain_all(worker: str | None = None) -> int:
    """Drain every shard nobody is draining (a dead drainer's batch, a half left behind); returns halves applied."""
    client = _client()
    try:
        return Drainer(client, worker or this_process()).run(first=0)
    except redis.RedisError:
        log.warning("ingest buffer unreachable; drained next time", exc_info=True)
        return 0
    finally:
        client.close()


class Drainer:
    """One process's turn at draining: it holds its worker's drainer slot, and one shard's lock at a time."""

    def __init__(self, client: redis.Redis, worker: str):
        self.client, self.slot, self.token = client, slot_key(worker), uuid.uuid4().hex

    def run(self, first: int) -> int:
        """Drain shards, ``first`` first, until a pass finds nothing; nothing if the worker's slot is taken."""
        applied = 0
        while self.client.set(self.slot, self.token, nx=True, px=_lock_ms()):
            try:
                while got := self._drain_once([first, *(s for s in range(SHARDS) if s != first)]):
                    applied += got
            finally:
                self.client.eval(RELEASE_SCRIPT, 1, self.slot, self.token)
            # A half appended while the slot was held, after its shard was last looked at, was
            # left by its task for this drainer: look once more now that the slot is free.
            if not self._unclaimed():
                return applied
        return applied

    def _unclaimed(self) -> bool:
        """Whether some shard has halves waiting and no drainer."""
        pipe = self.client.pipeline(transaction=False)
        for shard in range(SHARDS):
            pipe.exists(pending_key(shard), processing_key(shard))
            pipe.exists(lock_key(shard))
        found = pipe.execute()
        return any(waiting and not locked for waiting, locked in zip(found[::2], found[1::2]))

    def _drain_once(self, order: list[int]) -> int:
        """One batch from every shard that has halves and no other drainer, applied in one go; returns its halves.

        Each shard's part stays in its processing list, under its lock, until the batch is
        committed: a drainer that dies leaves every part for the shards' next owners. One
        transaction (one broadcast and one advance per sweep) for the batch, not one per shard.
        """
        pipe = self.client.pipeline(transaction=False)
        for shard in order:
            pipe.exists(pending_key(shard), processing_key(shard))
        held = [shard for shard, waiting in zip(order, pipe.execute()) if waiting and self._lock(shard)]
        if not held:
            return 0
        try:
            share = max(1, BATCH // len(held))
            taken = {shard: self.client.eval(TAKE_SCRIPT, 3, *self._keys(shard), share, self.token) for shard in held}
            payloads = []
            key = _seal_key()
            for raw in (raw for batch in taken.values() for raw in batch or ()):
                text = unsealed(raw, key)
                if text is None:  # not sealed by a server that checked it: planted (never applied)
                    reject(contract.TASK_RESULT, _shown(raw), "ingest buffer: an entry without the server's seal")
                    continue
                try:
                    payloads.append(json.loads(text))
                except ValueError:  # sealed, so ours: never block a shard on it
                    log.error("unreadable half in the ingest buffer dropped: %r", raw[:200])
            if not payloads and not any(taken.values()):
                return 0
            results.ingest_results(payloads)
            log.info("ingested %d halves (shards %s)", len(payloads), ",".join(str(s) for s in held if taken[s]))
            for shard in held:
                keys = self._keys(shard)
                if taken[shard] and not self.client.eval(
                    DONE_SCRIPT, 3, keys[1], keys[2], self.slot, self.token, _lock_ms()
                ):
                    log.warning("ingest shard %d: lock lost mid-batch; its new owner applies the batch again", shard)
            return max(1, len(payloads))
        finally:
            for shard in held:
                self.client.eval(RELEASE_SCRIPT, 1, lock_key(shard), self.token)

    @staticmethod
    def _keys(shard: int) -> tuple[str, str, str]:
        return pending_key(shard), processing_key(shard), lock_key(shard)

    def _lock(self, shard: int) -> bool:
        """This drainer's hold on a shard; False when another worker's drainer has it (it looks again after)."""
        return bool(self.client.set(lock_key(shard), self.token, nx=True, px=_lock_ms()))
