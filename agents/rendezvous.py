"""How rank 0 tells the other ranks the real port of its TCPStore.

Rank 0 binds port 0 (or the job's MASTER_PORT in a rehearsal) and then
publishes what it got, so two probes never race for a "free" port. Two
implementations: Redis (the agent, through the broker it already has) and
by hand (`python -m agents pair`, where an engineer copies ADDR:PORT).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

from agents.broker import redis_client
from agents.contract import RENDEZVOUS_KEY_PREFIX


class RendezvousTimeout(Exception):
    """No port was published within the timeout."""


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

    def lookup(self, timeout: float) -> int:
        raise NotImplementedError


class RedisRendezvous(Rendezvous):
    """The port lives under RENDEZVOUS_KEY_PREFIX + id, with a TTL so nothing outlives the probe."""

    def __init__(self, url: str, rendezvous_id: str, ttl_s: float, poll_s: float = 0.05):
        # The broker URL may be Celery's redis+socket:// form (agents inside network namespaces),
        # hold a password, or be rediss:// with the TLS files named in the environment.
        self.client = redis_client(url, socket_timeout=5, socket_connect_timeout=5)
        self.key = RENDEZVOUS_KEY_PREFIX + rendezvous_id
        self.ttl_ms = max(1000, int(ttl_s * 1000))
        self.poll_s = poll_s

    def _put(self, value: dict[str, Any]) -> None:
        self.client.set(self.key, json.dumps(value), px=self.ttl_ms)

    def publish(self, address: str, port: int) -> None:
        self._put({"address": address, "port": port})

    def publish_failure(self, reason: str, hint: str) -> None:
        self._put({"error": reason, "hint": hint})

    def lookup(self, timeout: float) -> int:
        end = time.monotonic() + timeout
        while True:
            raw = self.client.get(self.key)
            if raw is not None:
                value = json.loads(raw)
                if "error" in value:
                    raise PeerFailed(value["error"], value.get("hint") or "")
                return int(value["port"])
            if time.monotonic() >= end:
                raise RendezvousTimeout(f"no port under {self.key} after {timeout:.1f}s")
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

    def lookup(self, timeout: float) -> int:
        if self.port is None:
            raise RendezvousTimeout("no port was given for the master's store")
        return self.port


def from_spec(spec: dict[str, Any], announce: Callable[[str, int], object] | None = None) -> Rendezvous:
    """Build the rendezvous the runner described: {"kind": "redis", url, id, ttl_s} or {"kind": "manual", port}."""
    if spec.get("kind") == "redis":
        return RedisRendezvous(spec["url"], spec["id"], spec["ttl_s"])
    return ManualRendezvous(announce, spec.get("port"))
