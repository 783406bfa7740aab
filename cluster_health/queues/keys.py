"""The Redis keys where ingest's work waits: the buffer's shards, drainer slots and consumers' batches.

The ingest buffer and consumers write them; the backlog reads them to see what the
server was sent and has not applied yet.
"""

from __future__ import annotations

import hashlib
import hmac
from functools import partial
from typing import Any

import redis

KEY_PREFIX = "cluster_health:ingest"
# Drainers that may run at once, one per shard; both halves of a probe share a shard.
SHARDS = 8


def shard_key(shard: int, role: str) -> str:
    """A shard's Redis key: its pending list, the processing list of the batch being applied, or its drainer lock."""
    return f"{KEY_PREFIX}:{shard}:{role}"


pending_key = partial(shard_key, role="pending")
processing_key = partial(shard_key, role="processing")
lock_key = partial(shard_key, role="lock")


def slot_key(drainer: str) -> str:
    return f"{KEY_PREFIX}:drainer:{drainer}"


def buffer_keys() -> list[str]:
    """Every list a half may wait in, for the backlog's view of what is not applied yet."""
    return [key for shard in range(SHARDS) for key in (pending_key(shard), processing_key(shard))]


# A buffered half is its JSON text behind the server's seal: SEAL_HEX hex digits of an HMAC, then a tab.
SEAL_HEX = 64


def seal_key(secret: str) -> bytes:
    """The buffer's sealing key, derived from the server's SECRET_KEY (no agent holds it)."""
    return hmac.new(secret.encode(), b"cluster-health ingest buffer seal v1", hashlib.sha256).digest()


def sealed(text: str, key: bytes) -> str:
    """A checked half's JSON text as the ingest buffer keeps it: sealed by the server that checked it."""
    return hmac.new(key, text.encode(), hashlib.sha256).hexdigest() + "\t" + text


def unsealed(entry: str | bytes, key: bytes) -> str | None:
    """The JSON text of a buffer entry the server sealed, or None for one it did not (planted or damaged)."""
    if isinstance(entry, bytes):
        entry = entry.decode("utf-8", errors="replace")
    seal, tab, text = entry[:SEAL_HEX], entry[SEAL_HEX : SEAL_HEX + 1], entry[SEAL_HEX + 1 :]
    if tab != "\t":
        return None
    expected = hmac.new(key, text.encode(), hashlib.sha256).hexdigest()
    return text if hmac.compare_digest(seal, expected) else None


def shard_of(payload: Any) -> int:
    """The buffer shard of a half: by its probe, so both halves of a pair meet in one batch."""
    probe_id = payload.get("probe_id") if isinstance(payload, dict) else None
    return probe_id % SHARDS if isinstance(probe_id, int) and not isinstance(probe_id, bool) else 0


CONSUMERS = "cluster_health:ingest:consumers"  # the registry of consumer names (under KEY_PREFIX)


def taken_key(name: str) -> str:
    return f"{KEY_PREFIX}:taken:{name}"


def lease_key(name: str) -> str:
    return f"{KEY_PREFIX}:lease:{name}"


def registered(client: redis.Redis) -> list[str]:
    """Every consumer name that may hold a batch (the backlog's view reads their ``taken`` lists)."""
    return sorted(n.decode(errors="replace") if isinstance(n, bytes) else n for n in client.smembers(CONSUMERS))
