"""The TCP connections a rank holds, with the kernel's counters: bytes sent and not acknowledged,
retransmissions, and how long since the last byte each way (``ss -tinp``, parsed)."""

from __future__ import annotations

import re
import subprocess
from typing import Any

MAX_CONNECTIONS = 64  # per rank: a rank of a 64-node job holds a few per peer
SS_TIMEOUT_S = 10.0
_PID = re.compile(r"pid=(\d+)")
_FIELD = re.compile(r"\b(bytes_sent|bytes_acked|bytes_received|lastsnd|lastrcv|lastack|unacked|rto):(\d+)")
_RETRANS = re.compile(r"\bretrans:(\d+)/(\d+)")


def _endpoint(text: str) -> str:
    return text.replace("[::ffff:", "").replace("]", "")


def parse_ss(text: str) -> dict[int, list[dict[str, Any]]]:
    """``ss -tinpH`` output as {pid: [connection, ...]}; a connection's info line follows its own."""
    out: dict[int, list[dict[str, Any]]] = {}
    current: list[dict[str, Any]] = []
    for line in text.splitlines():
        if not line.strip():
            continue
        if not line[0].isspace():  # a connection: state, queues, local, peer, users
            parts = line.split()
            current = []
            if len(parts) < 5:
                continue
            conn = {
                "state": parts[0].lower(),
                "send_queue": int(parts[2]) if parts[2].isdigit() else None,
                "local": _endpoint(parts[3]),
                "peer": _endpoint(parts[4]),
            }
            for pid in {int(p) for p in _PID.findall(line)}:
                bucket = out.setdefault(pid, [])
                if len(bucket) < MAX_CONNECTIONS:
                    bucket.append(dict(conn))
                    current.append(bucket[-1])
            continue
        counters = {name: int(value) for name, value in _FIELD.findall(line)}
        retrans = _RETRANS.search(line)
        for conn in current:
            sent, acked = counters.get("bytes_sent"), counters.get("bytes_acked")
            # bytes_acked counts the SYN: one more than the data acknowledged.
            conn["unacked_bytes"] = max(0, sent - (acked - 1)) if sent is not None and acked else conn.get("send_queue")
            conn["retransmits"] = int(retrans.group(2)) if retrans else 0
            conn["since_send_ms"] = counters.get("lastsnd")
            conn["since_receive_ms"] = counters.get("lastrcv")
            conn["bytes_received"] = counters.get("bytes_received")
    return out


def connections(pids: set[int]) -> dict[int, list[dict[str, Any]]]:
    """The TCP connections of these processes, as the kernel reports them now ({} if ss cannot run)."""
    try:
        run = subprocess.run(["ss", "-tinpH"], capture_output=True, text=True, timeout=SS_TIMEOUT_S, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return {}
    return {pid: conns for pid, conns in parse_ss(run.stdout).items() if pid in pids}
