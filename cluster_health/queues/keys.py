"""The Redis keys where ingest's work waits: nodes' ingest lists, the buffer's shards, drainer slots and
consumers' batches.

Agents append to their own node's list (contract.ingest_queue); the ingest consumers drain
and cap those lists and write the rest; the backlog reads them all to see what the server
was sent and has not applied yet.
"""

from __future__ import annotations

import hashlib
import hmac
from functools import partial
from typing import Any

import redis

from agents import contract

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


# A node's ingest list holds at most NODE_CAP messages: past that the newest are dropped (the oldest, its
# halves from before a server outage, stay), counted per node in DROPPED. A heartbeat every 5 s fills it
# in about 20 minutes of a server outage; a flood from one node fills only its own.
NODE_CAP = 256
DROPPED = f"{KEY_PREFIX}:dropped"  # hash: node -> messages dropped from its list past NODE_CAP


def node_of_list(key: str | bytes) -> str | None:
    """The node whose ingest list this key is, or None for any other key."""
    if isinstance(key, bytes):
        key = key.decode(errors="replace")
    if not key.startswith(contract.INGEST_QUEUE_PREFIX):
        return None
    node = key[len(contract.INGEST_QUEUE_PREFIX) :]
    return node if contract.is_node_name(node) else None


def node_lists(client: redis.Redis) -> list[str]:
    """Every node's ingest list that holds a message now (an empty list is no key in Redis)."""
    found = {
        key.decode(errors="replace") if isinstance(key, bytes) else key
        for key in client.scan_iter(match=contract.INGEST_QUEUE_PREFIX + "*", count=1000)
    }
    return sorted(key for key in found if node_of_list(key) is not None)


def waiting_on_ingest(client: redis.Redis) -> int:
    """Messages waiting on every node's ingest list and the fleet's old shared one (not yet taken by a consumer)."""
    return sum(client.llen(key) for key in [contract.INGEST_QUEUE, *node_lists(client)])


def dropped(client: redis.Redis) -> dict[str, int]:
    """Messages dropped from each node's ingest list past NODE_CAP, since Redis last lost its keys."""
    return {
        (k.decode(errors="replace") if isinstance(k, bytes) else k): int(v) for k, v in client.hgetall(DROPPED).items()
    }


# Lua: trim(dropped_key, first, last, cap, prefix_len) trims the nodes' ingest lists KEYS[first..last] to
# ``cap`` messages each, keeping the oldest, and counts what it drops per node (the key past its prefix)
# in the hash ``dropped_key``; returns {node, dropped, node, dropped, ...}. The consumer's take and the
# backlog's snapshot both start with it, so the backlog reads every node's list in full.
TRIM_LUA = """
local function trim(dropped_key, first, last, cap, prefix_len)
  local dropped = {}
  for k = first, last do
    local n = redis.call('LLEN', KEYS[k])
    if n > cap then
      redis.call('LTRIM', KEYS[k], -cap, -1)
      local node = string.sub(KEYS[k], prefix_len + 1)
      redis.call('HINCRBY', dropped_key, node, n - cap)
      dropped[#dropped + 1] = node
      dropped[#dropped + 1] = n - cap
    end
  end
  return dropped
end
"""
