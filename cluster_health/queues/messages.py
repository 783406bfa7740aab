"""Task messages as Celery's Redis transport stores them, read without Celery: the one reader.

The ingest consumer, the reaper's backlog and the fleet simulator all go through it.
"""

from __future__ import annotations

import base64
from datetime import UTC, datetime
from typing import Any

from agents import signing
from cluster_health import jsontext

# A stored message larger than this is refused unread: a signed half is at most MAX_SIGNED_BYTES,
# and the transport's base64 and envelope add about a third.
MAX_MESSAGE_BYTES = 2 * signing.MAX_SIGNED_BYTES


def read(raw: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """(headers, keyword arguments) of a task message as Celery's Redis transport stores it. Raises ValueError.

    The one reader of raw task messages: the consumer, the reaper's backlog and the fleet
    simulator all go through it. A message whose JSON is already parsed (a dict) is read as is.
    """
    if isinstance(raw, (bytes, str)) and len(raw) > MAX_MESSAGE_BYTES:
        raise ValueError(f"{len(raw)} bytes, more than the {MAX_MESSAGE_BYTES} a half's message can take")
    try:
        message = jsontext.loads(raw) if isinstance(raw, (bytes, str)) else raw
        headers = message.get("headers") or {}
        if not isinstance(headers, dict):
            raise TypeError("headers")
        body = message.get("body") or ""
        if (message.get("properties") or {}).get("body_encoding") == "base64":
            body = base64.b64decode(body, validate=True)
        args = jsontext.loads(body)
        kwargs = args[1] if isinstance(args, list) and len(args) >= 2 else None
    except (ValueError, TypeError, AttributeError, RecursionError) as exc:
        raise ValueError(f"not a task message as Celery stores it ({type(exc).__name__})") from None
    if not isinstance(kwargs, dict):
        raise ValueError("not a task message as Celery stores it (no keyword arguments)")
    return headers, kwargs


def decode(raw: Any) -> tuple[str | None, dict[str, Any], bool]:
    """A message as Celery's Redis transport stores it: (task name, keyword arguments, expired). Raises ValueError."""
    headers, kwargs = read(raw)
    task = headers.get("task")
    return (task if isinstance(task, str) else None), kwargs, _expired(headers.get("expires"))


def _expired(expires: Any) -> bool:
    """Whether a message's ``expires`` header (ISO 8601, as Celery writes it) has passed."""
    if not isinstance(expires, str):
        return False
    try:
        when = datetime.fromisoformat(expires)
    except ValueError:
        return False
    return (when if when.tzinfo else when.replace(tzinfo=UTC)) < datetime.now(UTC)
