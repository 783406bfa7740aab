"""Messages that cannot be applied: kept with the reason (bounded), logged, never raised into a worker."""

from __future__ import annotations

import json
import logging
import reprlib

from cluster_health.ingest.outcomes import REJECTED
from cluster_health.models import RejectedMessage

log = logging.getLogger(__name__)
MAX_ERROR_TEXT = 4000  # characters of the reason kept (the column is a TextField)
MAX_STORED_JSON = 16 * 1024  # a payload larger than this is kept as a truncated repr
MAX_RAW_REPR = 8000  # characters of a payload's repr that are kept
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
    """Keep a message that cannot be applied, with the reason, and log it."""
    if not node and isinstance(payload, dict) and isinstance(payload.get("node"), str):
        node = payload["node"]
    node, error = _clean(node, 100), _clean(error, MAX_ERROR_TEXT)
    task = _clean(task, 40)
    RejectedMessage.objects.create(task=task, node=node, error=error, payload=_storable(payload))
    log.warning("rejected %s from %r: %s", task, node, error[:300])
    return REJECTED


def other_sweep(result: dict, probe) -> str | None:
    """Why a result naming another sweep than its probe row's cannot be applied (None: it names that one, or none)."""
    if result["sweep_id"] is not None and result["sweep_id"] != probe.sweep_id:
        return f"sweep_id: probe {probe.pk} belongs to sweep {probe.sweep_id}, not {result['sweep_id']}"
    return None
