"""What the server was sent and has not applied yet: queued, held by a worker or an ingest consumer, or in the ingest buffer.

Silence is judged against this, not only against the rows: a node whose heartbeat
or result is still waiting for a server worker (one back from an outage, a broker
backlog) is not silent, and a probe whose result is waiting is not overdue.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import redis
from django.conf import settings

from agents import broker, contract, signing
from cluster_health import vocabulary
from cluster_health.queues import keys, messages

log = logging.getLogger(__name__)

# A message a worker reserved longer ago than this is not about to be applied: its worker
# died, and the broker hands it back only after the visibility timeout (an hour). Generous,
# because prefetched messages wait behind the longest task (planning a large sweep).
RESERVED_ORPHAN_S = 120.0
# Waiting messages are read (to see whose they are) up to this many per list: a 1,024-node round's
# halves, in a consumer's batch or on the fleet's old ingest queue. A longer queue is an outage's
# backlog, and nothing is judged until the server has worked through it. Every node's own ingest list
# is read in full, whatever one node sends: it is trimmed to keys.NODE_CAP first.
PEEK_MAX = 1100


# What a waiting message of each kind carries: task name -> the argument holding its signed body.
SIGNED = {contract.TASK_HEARTBEAT: "heartbeat", contract.TASK_RESULT: "result"}


@dataclass
class Backlog:
    """What was sent to the server and not yet applied: queued, or fetched by a worker and not acked.

    A waiting heartbeat or half speaks for its node only once its signature checks out, as
    the consumer will check it (``settle``): anyone who can write to the broker can queue, or
    plant in the transport's ``unacked`` hash, a message naming any node or probe, and a
    backlog that believed it would keep that node from ever being judged offline, or that
    probe's deadline from ever being judged. A message that is unreadable or does not verify
    is no node's, so it defers nothing either.
    """

    messages: int = 0
    complete: bool = True  # every waiting message was read; otherwise whose they are is unknown
    nodes: set[str] = field(default_factory=set)  # nodes with a heartbeat or result waiting
    probes: set[tuple[str, int]] = field(default_factory=set)  # ("pair" | "group", id) with a result waiting
    # Who sent each: a waiting half defers its probe's judgement only if its node is one of the probe's
    # (``waiting``), so that a node sending halves that name others' probes defers nothing of theirs.
    senders: dict[tuple[str, int], set[str]] = field(default_factory=dict)
    sweeps: set[int] = field(default_factory=set)  # sweeps with a start task waiting
    unverified: list[tuple[str, Any, Any]] = field(default_factory=list)  # (purpose, body, auth) to settle

    def add(self, raw) -> None:
        """Count one message as the Redis transport stores it, unless it applies nothing (a reaper run)."""
        try:
            headers, kwargs = messages.read(raw)
        except ValueError:
            self.messages += 1  # unreadable: the consumer rejects it, and it is nobody's
            return
        own = _current_task_id()
        if headers.get("task") == vocabulary.TASK_REAP or (own is not None and headers.get("id") == own):
            return
        self.messages += 1
        task = headers.get("task")
        if task in SIGNED:
            self.unverified.append((SIGNED[task], kwargs.get(SIGNED[task]), kwargs.get("auth")))
        elif task == vocabulary.TASK_START_SWEEP:
            sweep_id = kwargs.get("sweep_id")
            if isinstance(sweep_id, int) and not isinstance(sweep_id, bool):
                self.sweeps.add(sweep_id)

    def add_buffered(self, entry: str) -> None:
        """Count one half waiting in the ingest buffer, given as "node<TAB>kind<TAB>probe id".

        Only the consumer writes the buffer, after checking each half's signature; the drainer
        checks the consumer's seal on each again before it applies one.
        """
        self.messages += 1
        node, _, rest = entry.partition("\t")
        kind, _, probe_id = rest.partition("\t")
        if not probe_id.isdigit() or not contract.is_node_name(node):
            return
        self.nodes.add(node)
        self._probe(probe_table(kind), int(probe_id), node)

    def _probe(self, table: str, probe_id: int, node: str) -> None:
        self.probes.add((table, probe_id))
        self.senders.setdefault((table, probe_id), set()).add(node)

    def waiting(self, table: str, members: dict[int, Iterable[str]]) -> set[int]:
        """Of these probes (id -> its nodes), those with a half waiting from one of their own nodes."""
        return {pk for pk, nodes in members.items() if self.senders.get((table, pk), set()) & set(nodes)}

    def named(self, table: str) -> set[int]:
        """The probes of this table that some waiting half names."""
        return {pk for kind, pk in self.probes if kind == table}

    def settle(self) -> None:
        """Let the waiting heartbeats and halves whose signatures check out speak for their nodes and probes."""
        from cluster_health.models import AgentKey

        envelopes = [auth for _, _, auth in self.unverified if signing.well_formed(auth)]
        keys = AgentKey.secrets_for({(a["node"], a["kid"]) for a in envelopes}) if envelopes else {}
        now = time.time()
        for purpose, body, auth in self.unverified:
            if not _genuine(purpose, body, auth, keys, now):
                continue
            self.nodes.add(body["node"])
            if purpose == "result" and isinstance(body.get("probe_id"), int):
                self._probe(probe_table(body.get("kind", "pair")), body["probe_id"], body["node"])
        self.unverified = []


def probe_table(kind: object) -> str:
    """Which rows a result of this kind closes: "pair" (pair and discover probes), "gpu" (a node's gpu
    check), else "group" (group collectives, launch rehearsals)."""
    if kind in ("pair", "discover", "nil"):
        return "pair"
    return "gpu" if kind == "gpu" else "group"


def _genuine(purpose: str, body: Any, auth: Any, keys: dict, now: float) -> bool:
    """Whether a waiting message would pass the consumer's signature check (its nonce aside)."""
    if not isinstance(body, dict) or not contract.is_node_name(body.get("node")):
        return False
    if auth is None and settings.ALLOW_UNSIGNED_AGENTS:
        return True  # development only, as the consumer accepts it
    try:
        signing.verify(
            body, auth, purpose, lambda n, k: keys.get((n, k)), now=now, window_s=settings.SIGNATURE_WINDOW_S
        )
    except signing.SignatureError:
        return False
    return True


# Halves in the ingest buffer are read up to this many (a round at 1,024 nodes is 1,024 halves);
# only the node, kind and probe of each leave Redis.
BUFFER_PEEK_MAX = 20000

# The queues' lengths and heads, the server messages workers reserved recently, every node's ingest list in
# full (each trimmed to its cap first, as the consumer trims it), and the halves in the ingest buffer, read
# atomically. KEYS: unacked index, unacked hash, the dropped counts, then ARGV[4] lists of task messages
# read up to ARGV[1] each (the server queue, the old ingest queue, ingest consumers' batches), then ARGV[5]
# nodes' ingest lists, then the buffer's lists. ARGV: how many messages to read per list, oldest score, how
# many buffered halves to read, ARGV[4], ARGV[5], a node list's cap, the nodes' lists' prefix length, the
# longest message the consumer reads (a longer one is refused unread, and comes back here as '').
SNAPSHOT_SCRIPT = (
    keys.TRIM_LUA
    + """
local lists, nodes = tonumber(ARGV[4]), tonumber(ARGV[5])
local dropped = trim(KEYS[3], 4 + lists, 3 + lists + nodes, tonumber(ARGV[6]), tonumber(ARGV[7]))
local queued, head = 0, {}
for k = 4, 3 + lists do
  queued = queued + redis.call('LLEN', KEYS[k])
  for _, raw in ipairs(redis.call('LRANGE', KEYS[k], 0, tonumber(ARGV[1]) - 1)) do head[#head + 1] = raw end
end
local longest = tonumber(ARGV[8])
for k = 4 + lists, 3 + lists + nodes do
  for _, raw in ipairs(redis.call('LRANGE', KEYS[k], 0, -1)) do
    queued = queued + 1
    if #raw > longest then head[#head + 1] = '' else head[#head + 1] = raw end
  end
end
local reserved = {}
for i, tag in ipairs(redis.call('ZRANGEBYSCORE', KEYS[1], ARGV[2], '+inf')) do
  reserved[i] = redis.call('HGET', KEYS[2], tag)
end
local buffered, total = {}, 0
for k = 4 + lists + nodes, #KEYS do
  total = total + redis.call('LLEN', KEYS[k])
  if total <= tonumber(ARGV[3]) then
    for _, raw in ipairs(redis.call('LRANGE', KEYS[k], 0, -1)) do
      local ok, half = pcall(cjson.decode, string.sub(raw, 66))  -- past the server's seal and its tab
      if ok and type(half) == 'table' then
        buffered[#buffered + 1] = tostring(half['node']) .. '\t' .. tostring(half['kind'])
          .. '\t' .. tostring(half['probe_id'])
      else
        buffered[#buffered + 1] = ''
      end
    end
  end
end
return {queued, head, reserved, buffered, total, dropped}
"""
)


def _current_task_id() -> str | None:
    from celery import current_task

    return getattr(getattr(current_task, "request", None), "id", None)


def server_backlog(settle: bool = True) -> Backlog | None:
    """Messages sent to the server and not yet applied, or None when the broker cannot be asked.

    ``settle=False`` leaves the waiting messages' signatures unchecked (``Backlog.settle``): a
    caller that may have nothing to judge checks them only when it has something.

    Reads both the queue's list and what workers have fetched but not acked: Celery's
    Redis transport moves a prefetched (or, with acks_late, running) message into the
    ``unacked`` hash, where LLEN does not see it, so a worker just back from an outage
    holds the very heartbeats and results that LLEN calls drained. One script reads both,
    so a message moving from one to the other is seen once.
    """
    client = broker.redis_client(settings.REDIS_URL, socket_connect_timeout=2, socket_timeout=2)
    options = getattr(settings, "CELERY_BROKER_TRANSPORT_OPTIONS", {}) or {}
    try:
        lists = [
            vocabulary.SERVER_QUEUE,
            contract.INGEST_QUEUE,
            *(keys.taken_key(name) for name in keys.registered(client)),
        ]
        nodes = keys.node_lists(client)
        script_keys = [
            options.get("unacked_index_key", "unacked_index"),
            options.get("unacked_key", "unacked"),
            keys.DROPPED,
            *lists,
            *nodes,
            *keys.buffer_keys(),
        ]
        queued, head, reserved, buffered, in_buffer, dropped = client.eval(
            SNAPSHOT_SCRIPT,
            len(script_keys),
            *script_keys,
            PEEK_MAX,
            time.time() - RESERVED_ORPHAN_S,
            BUFFER_PEEK_MAX,
            len(lists),
            len(nodes),
            keys.NODE_CAP,
            len(contract.INGEST_QUEUE_PREFIX),
            messages.MAX_MESSAGE_BYTES,
        )
    except redis.RedisError:
        return None
    finally:
        client.close()
    for i in range(0, len(dropped) - 1, 2):
        log.warning(
            "backlog: node %s sent past its ingest list's cap of %d: %d of its newest messages dropped",
            dropped[i].decode(errors="replace"),
            keys.NODE_CAP,
            int(dropped[i + 1]),
        )
    backlog = Backlog()
    for raw in head:
        backlog.add(raw)
    if queued > len(head):
        backlog.messages += queued - len(head)
        backlog.complete = False
    for entry in reserved:
        try:
            raw, _exchange, routing_key = json.loads(entry)
        except (TypeError, ValueError):
            continue  # acked meanwhile
        if routing_key == vocabulary.SERVER_QUEUE:  # agents' commands share the hash
            backlog.add(raw)
    for entry in buffered:
        backlog.add_buffered(entry.decode(errors="replace"))
    if in_buffer > len(buffered):
        backlog.messages += in_buffer - len(buffered)
        backlog.complete = False
    if settle:
        backlog.settle()
    return backlog


def unheard_is_not_silent(names: Iterable[str]) -> set[str]:
    """Of these nodes, those that must not be judged offline now: a message from them waits on the server.

    All of them when the backlog cannot be read in full. For the round dispatch and the
    verdict, which judge a node's heartbeat as the reaper does.
    """
    backlog = server_backlog()
    if backlog is None or not backlog.complete:
        return set(names)
    return backlog.nodes & set(names)
