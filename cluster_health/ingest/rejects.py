"""Messages that cannot be applied: kept with the reason (bounded), logged, never raised into a worker."""

from __future__ import annotations

import json
import logging
import reprlib
import time

import redis
from django.conf import settings

from cluster_health import shared_redis
from cluster_health.ingest.outcomes import REJECTED
from cluster_health.models import RejectedMessage

log = logging.getLogger(__name__)
MAX_ERROR_TEXT = 4000  # characters of the reason kept (the column is a TextField)
MAX_STORED_JSON = 16 * 1024  # a payload larger than this is kept as a truncated repr
MAX_RAW_REPR = 8000  # characters of a payload's repr that are kept
COUNTS_KEY = "cluster_health:rejected"  # every rejected message counted here; per minute under :minute:N
UNKEPT_KEY = "cluster_health:rejected:unkept"  # those past the minute's budget, counted and not kept
# A bounded repr: a payload nested deeper than Python's recursion limit must still be recorded.
_RAW = reprlib.Repr()
_RAW.maxlevel, _RAW.maxdict, _RAW.maxlist, _RAW.maxstring, _RAW.maxother = 8, 64, 64, 2000, 200


def _storable(payload):
    """The payload as stored JSON, or a truncated text when it is large, not JSON (NaN, odd types) or holds
    what a database cannot keep.

    PostgreSQL refuses NUL and lone surrogates in text and jsonb (and no driver can encode a
    lone surrogate), so either would make the reject itself fail; the JSON text of the
    payload writes both as escapes, which are stored as plain characters.
    """
    try:
        text = json.dumps(payload, allow_nan=False)
    except (TypeError, ValueError, RecursionError):
        return {"raw": _clean(_RAW.repr(payload), MAX_RAW_REPR)}
    if len(text) > MAX_STORED_JSON or "\\u0000" in text or _lone_surrogates(payload):
        return {"truncated": text[:MAX_RAW_REPR], "bytes": len(text)}
    return payload if isinstance(payload, (dict, list)) else {"raw": payload}


def _lone_surrogates(payload) -> bool:
    try:
        json.dumps(payload, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def _clean(text: str, limit: int) -> str:
    """Text any database and log can take: NUL and lone surrogates written as escapes."""
    return text.replace("\x00", "\\x00").encode("utf-8", "backslashreplace").decode("utf-8")[:limit]


def reject(task: str, payload, error: str, node: str = "") -> str:
    """Keep a message that cannot be applied, with the reason, and log it: at most
    REJECTED_STORED_PER_MINUTE of them a minute across the server; past that they are only
    counted (``counts``, in /metrics), so a flood of junk, or a fleet whose clocks are off,
    costs a counter increment each instead of a row and a log line."""
    if not node and isinstance(payload, dict) and isinstance(payload.get("node"), str):
        node = payload["node"]
    node, error = _clean(node, 100), _clean(error, MAX_ERROR_TEXT)
    task = _clean(task, 40)
    seen = _count()
    if seen > settings.REJECTED_STORED_PER_MINUTE:
        _count_unkept()
        if seen == settings.REJECTED_STORED_PER_MINUTE + 1:
            log.warning(
                "more than %d rejected messages this minute: the rest are counted, not kept (the last: %s from %r)",
                settings.REJECTED_STORED_PER_MINUTE,
                task,
                node,
            )
        return REJECTED
    RejectedMessage.objects.create(task=task, node=node, error=error, payload=_storable(payload))
    log.warning("rejected %s from %r: %s", task, node, error[:300])
    return REJECTED


def _count() -> int:
    """Count one rejected message (in all, and in this minute); returns this minute's count so far.

    Redis out of reach: 0, so the message is kept (ingest is down then anyway)."""
    minute = COUNTS_KEY + f":minute:{int(time.time() // 60)}"
    try:
        pipe = shared_redis.client().pipeline(transaction=False)
        pipe.incr(COUNTS_KEY)
        pipe.incr(minute)
        pipe.expire(minute, 120)
        _, seen, _ = pipe.execute()
    except redis.RedisError:
        return 0
    return int(seen)


def _count_unkept() -> None:
    try:
        shared_redis.client().incr(UNKEPT_KEY)
    except redis.RedisError:
        pass


def counts() -> tuple[int, int] | None:
    """(rejected messages counted, of them not kept) since Redis last lost its keys; None if unreadable."""
    try:
        total, unkept = shared_redis.client().mget(COUNTS_KEY, UNKEPT_KEY)
    except redis.RedisError:
        return None
    return int(total or 0), int(unkept or 0)


def other_sweep(result: dict, probe) -> str | None:
    """Why a result naming another sweep than its probe row's cannot be applied (None: it names that one, or none)."""
    if result["sweep_id"] is not None and result["sweep_id"] != probe.sweep_id:
        return f"sweep_id: probe {probe.pk} belongs to sweep {probe.sweep_id}, not {result['sweep_id']}"
    return None


def dropped_counts() -> dict[str, int] | None:
    """Messages dropped per node from its ingest list past its cap (queues.keys.NODE_CAP); None if unreadable."""
    from cluster_health.queues import keys

    try:
        return keys.dropped(shared_redis.client())
    except redis.RedisError:
        return None
