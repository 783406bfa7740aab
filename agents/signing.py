"""Signed messages between the server and the agents: HMAC-SHA256 over canonical JSON.

Part of the message contract (plain data, no Django, no Celery): the agent signs
its heartbeats and results with its own node key, the server signs the commands
it sends to a node with that node's key, and both sides verify with the same
functions. A signature covers the message body and an envelope that names the
node, the key id, the purpose (heartbeat, result, command), a timestamp and a
random nonce, so a message cannot be replayed later, moved to another purpose,
or spoken for another node: one node's key verifies for that node only.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import math
import os
import re
import secrets
import stat
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from agents.contract import ContractError, check_node_name, shown

PURPOSES = ("heartbeat", "result", "command", "inspection")
DEFAULT_WINDOW_S = 300.0  # clock skew and queueing a signed message may have; nonces are kept this long
MAX_SIGNED_BYTES = 1024 * 1024  # no agent message is larger: bigger ones are refused before any work
KEY_FILE_VERSION = 1
# The auth fields that are lowercase hex, and how many digits each has.
HEX_DIGITS = {"kid": 16, "nonce": 32, "sig": 64}


_HEX = {digits: re.compile(f"^[0-9a-f]{{{digits}}}$") for digits in HEX_DIGITS.values()}


def _is_hex(val: Any, digits: int) -> bool:
    return isinstance(val, str) and _HEX[digits].match(val) is not None


class SignatureError(ContractError):
    """A message is unsigned, signed wrongly, stale, or for another node; the text says which."""


@dataclass(frozen=True)
class NodeKey:
    """One node's signing key, as the key file holds it."""

    node: str
    key_id: str
    secret: str

    def secret_for(self, node: str, key_id: str) -> bytes | None:
        """Lookup for verify(): this key only, for this node only."""
        if node == self.node and hmac.compare_digest(key_id, self.key_id):
            return self.secret.encode()
        return None


def new_key(node: str) -> NodeKey:
    """A fresh random key for a node (256 bits of secret)."""
    return NodeKey(check_node_name(node), secrets.token_hex(8), secrets.token_urlsafe(32))


# Made once: json.dumps with options builds an encoder at every call, and every message is encoded
# at least twice (its body and its envelope) on each side.
_CANONICAL = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False)


def canonical(obj: Any) -> bytes:
    """The one byte encoding both sides sign: sorted keys, no spaces, ASCII, no NaN."""
    return _CANONICAL.encode(obj).encode()


def _mac(secret: bytes, envelope: dict[str, Any], body_bytes: bytes) -> str:
    # The envelope's canonical form, a separator no canonical JSON contains, then the body's.
    signed = canonical({k: v for k, v in envelope.items() if k != "sig"})
    return hmac.new(secret, signed + b"\n" + body_bytes, hashlib.sha256).hexdigest()


def sign(body: Any, key: NodeKey, purpose: str, now: float | None = None) -> dict[str, Any]:
    """The envelope (sent beside the body as ``auth``) that proves ``key`` sent ``body`` for ``purpose``."""
    if purpose not in PURPOSES:
        raise ValueError(f"purpose: {purpose!r}")
    envelope = {
        "node": key.node,
        "kid": key.key_id,
        "purpose": purpose,
        "ts": round(time.time() if now is None else now, 3),
        "nonce": secrets.token_hex(16),
    }
    envelope["sig"] = _mac(key.secret.encode(), envelope, canonical(body))
    return envelope


def check_envelope(auth: Any) -> dict[str, Any]:
    """The envelope's fields, each of the right type, or SignatureError."""
    if auth is None:
        raise SignatureError("unsigned: the message carries no signature")
    if not isinstance(auth, dict):
        raise SignatureError("auth: expected an object")
    try:
        check_node_name(auth.get("node"), "auth.node")
    except ContractError as exc:
        raise SignatureError(str(exc)) from None
    for field, digits in HEX_DIGITS.items():
        if not _is_hex(auth.get(field), digits):
            raise SignatureError(f"auth.{field}: malformed")
    if auth.get("purpose") not in PURPOSES:
        raise SignatureError("auth.purpose: malformed")
    ts = auth.get("ts")
    if isinstance(ts, bool) or not isinstance(ts, (int, float)) or not math.isfinite(ts):
        raise SignatureError("auth.ts: malformed")
    return auth


def well_formed(auth: Any) -> bool:
    """Whether an envelope's fields are each of the right type (check_envelope without the reason)."""
    try:
        check_envelope(auth)
    except SignatureError:
        return False
    return True


def verify(
    body: Any,
    auth: Any,
    purpose: str,
    secret_for: Callable[[str, str], bytes | None],
    now: float | None = None,
    window_s: float = DEFAULT_WINDOW_S,
) -> dict[str, Any]:
    """Check that ``body`` was signed for ``purpose`` by the node it names, recently; returns the envelope.

    ``secret_for(node, key_id)`` returns that node's current secret for that key id, or
    None if the key is unknown, revoked, or belongs to another node. The caller still
    has to refuse a nonce it has seen within the window (a replay).
    """
    auth = check_envelope(auth)
    if auth["purpose"] != purpose:
        raise SignatureError(f"auth.purpose: signed as a {auth['purpose']}, delivered as a {purpose}")
    named = body.get("node") if isinstance(body, dict) else None
    if named != auth["node"]:
        raise SignatureError(f"node: signed by {auth['node']} but speaks for {shown(named)}")
    now = time.time() if now is None else now
    if abs(now - auth["ts"]) > window_s:
        raise SignatureError(f"stale: signed {now - auth['ts']:.0f}s ago, outside the {window_s:.0f}s window")
    try:
        body_bytes = canonical(body)
    except (TypeError, ValueError, RecursionError):
        raise SignatureError("body: not canonical JSON (NaN, infinity or an odd type)") from None
    if len(body_bytes) > MAX_SIGNED_BYTES:
        raise SignatureError(f"size: {len(body_bytes)} bytes, at most {MAX_SIGNED_BYTES} allowed")
    secret = secret_for(auth["node"], auth["kid"])
    if secret is None:
        raise SignatureError(f"key: {auth['kid']} is not a current key of {auth['node']} (unknown or revoked)")
    try:
        expected = _mac(secret, auth, body_bytes)
    except (TypeError, ValueError, RecursionError):  # a field added to the envelope holds NaN or an odd type
        raise SignatureError("auth: not canonical JSON (NaN, infinity or an odd type)") from None
    if not hmac.compare_digest(expected, auth["sig"]):
        raise SignatureError("bad signature: the body or the envelope was changed, or the key is wrong")
    envelope: dict[str, Any] = auth
    return envelope


class NonceWindow:
    """Nonces seen within the window, in memory (one agent process); a second sight is a replay."""

    def __init__(self, window_s: float = DEFAULT_WINDOW_S, limit: int = 100_000):
        self.window_s, self.limit = window_s, limit
        self.seen: dict[str, float] = {}

    def claim(self, nonce: str, now: float | None = None) -> bool:
        now = time.time() if now is None else now
        if len(self.seen) >= self.limit or len(self.seen) % 1024 == 0:
            self.seen = {n: t for n, t in self.seen.items() if now - t <= 2 * self.window_s}
        if nonce in self.seen:
            return False
        self.seen[nonce] = now
        return True


def key_file_text(key: NodeKey) -> str:
    return json.dumps({"v": KEY_FILE_VERSION, "node": key.node, "key_id": key.key_id, "secret": key.secret}) + "\n"


def write_key_file(path: str | os.PathLike[str], key: NodeKey) -> None:
    """Write a key file readable by its owner only (created 0600, never briefly wider)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        os.fchmod(f.fileno(), 0o600)
        f.write(key_file_text(key))


def load_key_file(path: str | os.PathLike[str], node: str | None = None) -> NodeKey:
    """Read a key file; refuses one that others can read, or one made for another node."""
    try:
        st = os.stat(path)
        with open(path, encoding="utf-8") as f:
            data = json.loads(f.read())
    except (OSError, ValueError) as exc:
        raise SignatureError(f"key file {path}: cannot read it: {exc}") from None
    if st.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise SignatureError(f"key file {path}: readable by others (mode {oct(st.st_mode & 0o777)}); chmod 600 it")
    if not isinstance(data, dict) or data.get("v") != KEY_FILE_VERSION:
        raise SignatureError(f"key file {path}: not a cluster-health key file")
    key = NodeKey(str(data.get("node")), str(data.get("key_id")), str(data.get("secret")))
    if not _is_hex(key.key_id, HEX_DIGITS["kid"]) or len(key.secret) < 32:
        raise SignatureError(f"key file {path}: malformed key")
    if node is not None and key.node != node:
        raise SignatureError(f"key file {path}: made for node {key.node}, not {node}")
    return key
