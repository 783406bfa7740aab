"""Whether a command is still fresh, judged without trusting the agent's clock or the server's alone.

A command carries ``expires_at`` by the server's clock and, from servers that send it,
``lifetime_s``: how long after sending it may still start. Compared with the agent's
own clock, a node whose clock runs ahead of the server's by more than the lifetime
drops every command as expired (its pairs then time out, blamed on nothing), and one
behind runs stale ones. So the agent judges a command's age relative to the freshest
command it received lately: ``now - expires_at`` is the command's age plus the clocks'
offset (minus the lifetime), and its smallest value over recent commands is that same
offset for a command that did not wait in the queue. The difference is the age, skew
gone. A command older than the signature window by the agent's own clock is stale
whatever its peers say (a queue that held only stale commands after an outage).
"""

from __future__ import annotations

import time
from collections import deque

# How long a command's lag is remembered as a reference for the clocks' offset.
REFERENCE_S = 600.0


class Freshness:
    """The agent's judge of command age; one per agent process (not thread-safe: one command at a time)."""

    def __init__(self, window_s: float, reference_s: float = REFERENCE_S) -> None:
        self.window_s = window_s  # the signature window: the most the clocks may differ
        self.reference_s = reference_s
        self.lags: deque[tuple[float, float]] = deque()  # (local time, now - expires_at)

    def stale_by(self, expires_at: float, lifetime_s: float | None, now: float | None = None) -> float:
        """Seconds by which a command received now is past its start (0.0: fresh)."""
        now = time.time() if now is None else now
        lag = now - expires_at
        if lifetime_s is None:  # an older server's command: its own clock's word only
            return max(0.0, lag)
        while self.lags and self.lags[0][0] < now - self.reference_s:
            self.lags.popleft()
        self.lags.append((now, lag))
        waited = lag - min(lagged for _, lagged in self.lags)  # its age beyond the freshest command's
        if lag > self.window_s:
            return lag  # past expiry by more than the clocks may differ
        return max(0.0, waited - lifetime_s)
