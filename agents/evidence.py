"""What a probe half saw of the network, read from the kernel: the facts a gray failure is named from.

No torch, no Django. Every reader takes its /proc path as a parameter, so tests
feed recorded files. The counters are per network namespace (per node on a real
fleet): other traffic of the node adds to them, which makes them noisy but real.
"""

from __future__ import annotations

import socket
import struct
from typing import Any

SNMP_PATH = "/proc/net/snmp"
TCP_TABLE_PATH = "/proc/net/tcp"
# The Tcp counters of /proc/net/snmp worth keeping, by the kernel's names.
TCP_COUNTERS = (
    "ActiveOpens",
    "PassiveOpens",
    "AttemptFails",
    "EstabResets",
    "InSegs",
    "OutSegs",
    "RetransSegs",
    "InErrs",
    "OutRsts",
)
# /proc/net/tcp states and timers by their hex codes (include/net/tcp_states.h, tcp_ipv4.c get_tcp4_sock).
TCP_STATES = {
    1: "established",
    2: "syn_sent",
    3: "syn_recv",
    4: "fin_wait1",
    5: "fin_wait2",
    6: "time_wait",
    7: "close",
    8: "close_wait",
    9: "last_ack",
    10: "listen",
    11: "closing",
}
TCP_TIMERS = {0: None, 1: "retransmit", 2: "keepalive", 3: "time_wait", 4: "zero_window_probe"}
MAX_SOCKETS = 8  # sockets to the peer kept in a half's evidence


def tcp_counters(path: str = SNMP_PATH) -> dict[str, int] | None:
    """The namespace's cumulative Tcp counters, or None where /proc/net/snmp cannot be read."""
    try:
        with open(path) as f:
            lines = [ln.split() for ln in f if ln.startswith("Tcp:")]
    except OSError:
        return None
    if len(lines) < 2:
        return None
    values = dict(zip(lines[0][1:], lines[1][1:]))
    try:
        return {k: int(values[k]) for k in TCP_COUNTERS if k in values}
    except ValueError:
        return None


def tcp_delta(before: dict[str, int] | None, after: dict[str, int] | None) -> dict[str, Any] | None:
    """Counter increments during the probe, with the share of segments retransmitted in percent."""
    if not before or not after:
        return None
    out: dict[str, Any] = {k: max(0, after[k] - before[k]) for k in TCP_COUNTERS if k in before and k in after}
    sent = out.get("OutSegs", 0)
    out["retrans_pct"] = round(100.0 * out.get("RetransSegs", 0) / sent, 2) if sent else 0.0
    return out


def _ipv4(hex_addr: str) -> tuple[str, int]:
    ip, port = hex_addr.split(":")
    return socket.inet_ntoa(struct.pack("<I", int(ip, 16))), int(port, 16)


def peer_sockets(peer_ip: str | None, path: str = TCP_TABLE_PATH) -> list[dict[str, Any]]:
    """This namespace's TCP sockets to ``peer_ip`` holding unacknowledged data or still connecting.

    Unacknowledged bytes (``tx_queue``) with the retransmit timer running and a retransmit
    count mean the peer does not acknowledge what was sent: the packets are lost on the way.
    A zero-window probe instead means the peer is alive but not reading (a stopped process).
    """
    if not peer_ip:
        return []
    out: list[dict[str, Any]] = []
    try:
        with open(path) as f:
            rows = [ln.split() for ln in f.readlines()[1:]]
    except OSError:
        return []
    for cols in rows:
        try:
            local, remote = _ipv4(cols[1]), _ipv4(cols[2])
            if remote[0] != peer_ip:
                continue
            tx, rx = (int(x, 16) for x in cols[4].split(":"))
            timer = int(cols[5].split(":")[0], 16)
            state = int(cols[3], 16)
            if not (tx or int(cols[6], 16) or state in (2, 3)):
                continue  # idle or closing sockets say nothing about where bytes stopped
            out.append(
                {
                    "local": f"{local[0]}:{local[1]}",
                    "remote": f"{remote[0]}:{remote[1]}",
                    "state": TCP_STATES.get(state, cols[3]),
                    "tx_queue": tx,
                    "rx_queue": rx,
                    "timer": TCP_TIMERS.get(timer, str(timer)),
                    "retransmits": int(cols[6], 16),
                }
            )
        except (IndexError, ValueError):
            continue
    # The stuck ones first: they are the evidence.
    out.sort(key=lambda s: (-s["retransmits"], -s["tx_queue"]))
    return out[:MAX_SOCKETS]


def human_bytes(n: int | None) -> str:
    """1024 -> '1 KiB', 65536 -> '64 KiB', 4 -> '4 B'."""
    if n is None:
        return "?"
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= scale:
            value = n / scale
            return f"{value:.0f} {unit}" if value == int(value) else f"{value:.1f} {unit}"
    return f"{n} B"
