"""Who sent a message: the signature check every agent message passes before it is applied.

A heartbeat or result is applied only when its envelope verifies against the
node's current key (cluster_health.models.AgentKey, read uncached so a revoke
takes effect at once) and it is within the signature window. Anything else is
kept as a RejectedMessage with the reason.

Replays: a heartbeat whose nonce was already used (a Redis key that lives as
long as the window, shared by every server worker, set once the heartbeat is
applied) is a duplicate and changes nothing. It is not recorded as rejected:
Redis redelivers a message whose worker died before its ack, and that copy is
indistinguishable from a replay. Results need no nonce: applying a half is
idempotent, so a replayed (or redelivered) result is a duplicate as well.
"""

from __future__ import annotations

import logging
import math
import time
from typing import TypeGuard

from django.conf import settings

from agents import signing
from cluster_health import shared_redis
from cluster_health.ingest.outcomes import DUPLICATE
from cluster_health.ingest.rejects import reject
from cluster_health.models import AgentKey

log = logging.getLogger(__name__)
NONCE_KEY_PREFIX = "cluster-health:nonce:"


def _nonce_key(auth: dict) -> str:
    return f"{NONCE_KEY_PREFIX}{auth['node']}:{auth['nonce']}"


def _has_nonce(auth) -> TypeGuard[dict]:
    return isinstance(auth, dict) and "nonce" in auth and "node" in auth


def remember_nonce(auth) -> None:
    """Mark a signed message's nonce as used for the window (after it was applied)."""
    remember_nonces([auth])


def remember_nonces(auths: list) -> None:
    """Mark the nonces of many signed messages as used, in one round trip."""
    ttl = max(1, math.ceil(2 * settings.SIGNATURE_WINDOW_S))  # the window reaches both sides of "now"
    pipe = shared_redis.client().pipeline(transaction=False)
    for auth in filter(_has_nonce, auths):
        pipe.set(_nonce_key(auth), b"1", nx=True, ex=ttl)
    pipe.execute()


def first_uses(task: str, signed: list[tuple[object, object]]) -> list[tuple[object, object]]:
    """The (body, auth) pairs, already authenticated, whose nonce was not used before nor earlier in
    the list, asked of Redis in one round trip. The others, a replay or a redelivery, are logged
    and dropped, not recorded as rejected (see the module's docstring)."""
    keys = [_nonce_key(auth) if _has_nonce(auth) else None for _, auth in signed]
    pipe = shared_redis.client().pipeline(transaction=False)
    for wanted in filter(None, keys):
        pipe.exists(wanted)
    used = iter(pipe.execute())
    fresh: list[tuple[object, object]] = []
    seen: set[str] = set()
    for (body, auth), key in zip(signed, keys):
        if key is not None:
            if next(used) or key in seen:
                log.info("%s: nonce %s already used (a replay or a redelivery); ignored", task, key)
                continue
            seen.add(key)
        fresh.append((body, auth))
    return fresh


def authenticate(task: str, purpose: str, payload, auth, once: bool = False, secret_for=None) -> str | None:
    """None when the message may be applied; otherwise the REJECTED outcome, recorded with its reason.

    ``once``: a nonce already used gives DUPLICATE, unrecorded (the caller remembers it after applying).
    ``secret_for(node, key_id)``: the keys a batch's caller read at once (AgentKey.secrets_for);
    by default each message reads its node's key.
    """
    if auth is None and settings.ALLOW_UNSIGNED_AGENTS:
        return None  # development only (refused in production mode); a signed message is still checked
    try:
        envelope = signing.verify(
            payload,
            auth,
            purpose,
            secret_for or AgentKey.secret_for,
            now=time.time(),
            window_s=settings.SIGNATURE_WINDOW_S,
        )
        if once and not first_uses(task, [(payload, envelope)]):
            return DUPLICATE
    except signing.SignatureError as exc:
        node = str(auth["node"]) if isinstance(auth, dict) and isinstance(auth.get("node"), str) else ""
        return reject(task, payload, f"signature: {exc}", node=node)
    return None
