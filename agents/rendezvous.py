"""How rank 0 tells the other ranks the real port of its TCPStore.

Rank 0 binds port 0 (or the job's MASTER_PORT in a rehearsal) and then
publishes what it got, so two probes never race for a "free" port. Two
implementations: Redis (the agent, through the broker it already has) and
by hand (`python -m agents pair`, where an engineer copies ADDR:PORT).

The key is named after rank 0's node (contract.rendezvous_key), and a node's
broker user may write only the keys under its own name: no other node can
write over, delete or expire a probe's rendezvous (deny the probe). The value
is signed with the probe's own key too, which the server puts in both ranks'
signed commands: a value that is not rank 0's (a probe of the same node's own
making, a server without per-node keys) is ignored, and a rank that found only
such values says so when it gives up.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import time
from collections.abc import Callable
from typing import Any

from agents.broker import redis_client
from agents.contract import rendezvous_key

# A cold probe imports torch (and CUDA) before its store can listen: 4.5 s on an idle H100 node
# (docs/GPU.md), more on a busy one. The other ranks do not count the master's import against
# their store wait, up to this much: the rest of the probe's deadline slack (contract.DEADLINE_SLACK_S)
# is for their own start and reporting.
MASTER_IMPORT_PAUSE_MAX_S = 10.0


class RendezvousTimeout(Exception):
    """No port was published within the timeout. ``master_started``: rank 0 had said it was starting."""

    def __init__(self, text: str, master_started: bool = False):
        super().__init__(text)
        self.master_started = master_started


class PeerFailed(Exception):
    """Rank 0 published a failure instead of a port (for example its port was taken)."""

    def __init__(self, reason: str, hint: str):
        super().__init__(hint)
        self.reason = reason
        self.hint = hint


class Rendezvous:
    """Publish (rank 0) or look up (other ranks) the store port of one probe."""

    # True when the port is known before rank 0 is up: refusals are retried until the connect timeout.
    port_known_in_advance = False

    def publish(self, address: str, port: int) -> None:
        raise NotImplementedError

    def publish_failure(self, reason: str, hint: str) -> None:
        """Tell the other ranks not to wait: rank 0 cannot open its store."""

    def publish_importing(self) -> None:
        """Tell the other ranks that rank 0 runs and is importing torch: not to count that time against the store."""

    def lookup(self, timeout: float, pause_max_s: float = MASTER_IMPORT_PAUSE_MAX_S) -> int:
        """The master's store port, waiting up to ``timeout`` plus, while it says it is importing, up to ``pause_max_s``."""
        raise NotImplementedError


class RedisRendezvous(Rendezvous):
    """The port lives under rank 0's node and the probe's id (contract.rendezvous_key), with a TTL so
    nothing outlives the probe. ``master``: rank 0's node, the only one whose broker user may write it."""

    def __init__(
        self,
        url: str,
        rendezvous_id: str,
        ttl_s: float,
        poll_s: float = 0.05,
        secret: str | None = None,
        *,
        master: str,
    ) -> None:
        # The broker URL may be Celery's redis+socket:// form (agents inside network namespaces),
        # hold a password, or be rediss:// with the TLS files named in the environment.
        self.client = redis_client(url, socket_timeout=5, socket_connect_timeout=5)
        self.key = rendezvous_key(master, rendezvous_id)
        self.ttl_ms = max(1000, int(ttl_s * 1000))
        self.poll_s = poll_s
        self.secret = secret.encode() if secret else None  # None: an older server's command, values unsigned
        self.forged = 0  # values read that did not carry this probe's signature

    def _mac(self, text: str) -> str:
        assert self.secret is not None
        return hmac.new(self.secret, f"{self.key}\n{text}".encode(), hashlib.sha256).hexdigest()

    def _encode(self, value: dict[str, Any]) -> str:
        text = json.dumps(value, sort_keys=True)
        return json.dumps({"value": text, "mac": self._mac(text)}) if self.secret else text

    def _decode(self, raw: bytes) -> dict[str, Any] | None:
        """The value rank 0 wrote, or None for one it did not (no or a wrong signature, or junk)."""
        try:
            stored = json.loads(raw)
            if self.secret is None:
                return stored if isinstance(stored, dict) else None
            text = stored["value"]
            if not isinstance(text, str) or not hmac.compare_digest(str(stored["mac"]), self._mac(text)):
                return None
            value = json.loads(text)
        except (ValueError, TypeError, KeyError):
            return None
        return value if isinstance(value, dict) else None

    def _put(self, value: dict[str, Any]) -> None:
        self.client.set(self.key, self._encode(value), px=self.ttl_ms)

    def publish(self, address: str, port: int) -> None:
        self._put({"address": address, "port": port})

    def publish_failure(self, reason: str, hint: str) -> None:
        self._put({"error": reason, "hint": hint})

    def publish_importing(self) -> None:
        # NX: never over a port or a failure (rank 0 writes them later, but a stale probe's key may linger).
        self.client.set(self.key, self._encode({"importing": True}), px=self.ttl_ms, nx=True)

    def lookup(self, timeout: float, pause_max_s: float = MASTER_IMPORT_PAUSE_MAX_S) -> int:
        last = time.monotonic()
        end, paused, started = last + timeout, 0.0, False
        while True:
            raw = self.client.get(self.key)
            now = time.monotonic()
            value = self._decode(raw) if raw is not None else None
            if raw is not None and value is None:
                self.forged += 1
            if value is not None:
                if "error" in value:
                    raise PeerFailed(value["error"], value.get("hint") or "")
                if "port" in value:
                    return int(value["port"])
                started = True
                if value.get("importing") and paused < pause_max_s:
                    step = min(now - last, pause_max_s - paused)  # the master's import is not the store's time
                    paused += step
                    end += step
            if now >= end:
                forged = (
                    f"; {self.key} held a value without this probe's signature: something other than its"
                    " rank 0 wrote the rendezvous key"
                    if self.forged
                    else ""
                )
                raise RendezvousTimeout(
                    f"no port under {self.key} after {timeout:.1f}s (+{paused:.1f}s while the master imported torch)"
                    + forged,
                    master_started=started,
                )
            last = now
            time.sleep(self.poll_s)


class ManualRendezvous(Rendezvous):
    """Rank 0 announces ADDR:PORT through a callback; the other ranks are given the port by hand."""

    port_known_in_advance = True

    def __init__(self, announce: Callable[[str, int], object] | None = None, port: int | None = None):
        self.announce = announce
        self.port = port

    def publish(self, address: str, port: int) -> None:
        if self.announce:
            self.announce(address, port)

    def lookup(self, timeout: float, pause_max_s: float = MASTER_IMPORT_PAUSE_MAX_S) -> int:
        if self.port is None:
            raise RendezvousTimeout("no port was given for the master's store")
        return self.port


def from_spec(spec: dict[str, Any], announce: Callable[[str, int], object] | None = None) -> Rendezvous:
    """Build the rendezvous the runner described: {"kind": "redis", url, id, master, ttl_s, key} or {"kind": "manual", port}."""
    if spec.get("kind") == "redis":
        return RedisRendezvous(spec["url"], spec["id"], spec["ttl_s"], secret=spec.get("key"), master=spec["master"])
    return ManualRendezvous(announce, spec.get("port"))
