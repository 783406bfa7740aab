"""What a failed stage says: StageFailure, the first line of an error, and what a failed collective means.

Plain functions of the error text, no probe state: the ladder's stages, the watchdog
and the gpu check all read failures through here.
"""

from __future__ import annotations

import re

# The reason an overrun gets, by the stage it happened in.
TIMEOUT_REASONS = {
    "resolve": "dns",
    "connect": "connect_timeout",
    "store": "store_timeout",
    "init": "transport",
    "collective": "collective_timeout",
    "bandwidth": "collective_timeout",
}


# Gloo and NCCL word a dead peer or a dropped link several ways, depending on which side of
# the socket noticed first (read, write, or the pair's own state machine).
TRANSPORT_WORDS = (
    "connection reset",
    "connection closed",
    "closed by peer",
    "broken pipe",
    "eof",
    "end of file",
    "read error",
    "write error",
    "socket closed",
    "connection refused",
    "no route to host",
    "network is unreachable",
    "remote process exited",
    "communicator was aborted",
)
# Gloo prefixes its errors with the source file, e.g. "[.../gloo/transport/tcp/pair.cc:537] ";
# NCCL names each operation's timeout setting ("Timeout(ms)=600000") in errors that are no timeout.
SOURCE_LOCATION = re.compile(r"\[[^\]]*\.(?:cc|cpp|h|hpp):\d+\]\s*")
TIMEOUT_SETTING = re.compile(r"timeout\(ms\)\s*=\s*\d+", re.IGNORECASE)


def classify_collective_error(text: str, stage: str = "collective") -> tuple[str, str]:
    """(status, reason) for a collective (or process group init) that raised with this message.

    Every step that runs a collective goes through here, so a peer killed in any of them
    reads the same: `transport` for a dead peer or link, the stage's timeout reason for a
    timeout, and `collective_error` for anything else (`transport` during init).
    """
    body = TIMEOUT_SETTING.sub("", SOURCE_LOCATION.sub("", text)).lower()
    if "timed out" in body or "timeout" in body:
        return "timeout", TIMEOUT_REASONS.get(stage, "collective_timeout")
    if any(w in body for w in TRANSPORT_WORDS) or stage == "init":
        return "failed", "transport"
    return "failed", "collective_error"


class StageFailure(Exception):
    """The probe stops here, with a reason code and a hint a person can act on."""

    def __init__(self, reason: str, hint: str, detail: str | None = None, status: str = "failed"):
        super().__init__(hint)
        self.reason, self.hint, self.detail, self.status = reason, hint, detail, status

    @classmethod
    def timed_out(cls, reason: str, hint: str, cause: BaseException | None = None) -> StageFailure:
        """A stage that ran out of time; the first line of cause (the error that said so) is the detail."""
        return cls(reason, hint, detail=first_line(cause) if cause is not None else None, status="timeout")


def first_line(exc: BaseException) -> str:
    """The line of a torch exception that says what happened (they carry C++ frames below it)."""
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    for ln in lines:
        if not ln.startswith(("Exception raised from", "frame #", "[")):
            return f"{type(exc).__name__}: {ln}"[:400]
    return f"{type(exc).__name__}: {lines[0] if lines else ''}"[:400]
