"""What a probe half saw of the network, read from the kernel: the facts a gray failure is named from.

No torch, no Django. Every reader takes its /proc path as a parameter, so tests
feed recorded files. The counters are per network namespace (per node on a real
fleet): other traffic of the node adds to them, which makes them noisy but real.
"""

from __future__ import annotations

import os
import socket
import struct
import time
from typing import Any

NET_DEV_PATH = "/proc/net/dev"
STAT_PATH = "/proc/stat"
SNMP_PATH = "/proc/net/snmp"
TCP_TABLE_PATH = "/proc/net/tcp"
PSI_CPU_PATH = "/proc/pressure/cpu"
TASKS_PATH = "/proc/self/task"
MAX_TASKS = 256  # threads whose run-queue wait is summed (a probe has a few dozen)
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


def nic_bytes(interface: str | None, path: str = NET_DEV_PATH) -> int | None:
    """Bytes received plus sent by one interface so far, or None where it cannot be read."""
    if not interface:
        return None
    try:
        with open(path) as f:
            for line in f:
                name, sep, rest = line.partition(":")
                if sep and name.strip() == interface:
                    fields = rest.split()
                    return int(fields[0]) + int(fields[8])
    except (OSError, ValueError, IndexError):
        return None
    return None


def cpu_jiffies(path: str = STAT_PATH) -> tuple[int, int, int] | None:
    """The host's cumulative CPU time in clock ticks: (all, idle including iowait, stolen), or None."""
    try:
        with open(path) as f:
            fields = [int(x) for x in f.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    if len(fields) < 8:
        return None
    return sum(fields[:8]), fields[3] + fields[4], fields[7]


def psi_some_us(path: str = PSI_CPU_PATH) -> int | None:
    """Microseconds so far in which some runnable task waited for a CPU (the kernel's PSI), or None.

    From the ``some`` line's ``total=`` of /proc/pressure/cpu (Linux 4.20 and later, when PSI
    is on): in a container or a cgroup it is that group's pressure, which is what the probe felt.
    """
    try:
        with open(path) as f:
            for line in f:
                if line.startswith("some "):
                    for field in line.split()[1:]:
                        name, _, value = field.partition("=")
                        if name == "total":
                            return int(value)
    except (OSError, ValueError):
        return None
    return None


def run_queue_wait_ns(tasks: str = TASKS_PATH) -> int | None:
    """Nanoseconds this process's threads spent runnable but waiting for a CPU so far, or None.

    The second field of each thread's schedstat: the probe's own scheduling delay, whatever
    else on the host caused it.
    """
    total, seen = 0, 0
    try:
        names = os.listdir(tasks)[:MAX_TASKS]
    except OSError:
        return None
    for name in names:
        try:
            with open(os.path.join(tasks, name, "schedstat")) as f:
                total += int(f.read().split()[1])
                seen += 1
        except (OSError, ValueError, IndexError):
            continue  # a thread that ended meanwhile
    return total if seen else None


def load_snapshot(
    interface: str | None,
    net_dev: str = NET_DEV_PATH,
    stat: str = STAT_PATH,
    psi: str = PSI_CPU_PATH,
    tasks: str = TASKS_PATH,
) -> dict[str, Any]:
    """What the host and the probe's interface had done by now, and this process's own CPU time and wait."""
    own = os.times()
    return {
        "t": time.monotonic(),
        "nic": nic_bytes(interface, net_dev),
        "cpu": cpu_jiffies(stat),
        "own_cpu_s": own.user + own.system,
        "psi_us": psi_some_us(psi),
        "wait_ns": run_queue_wait_ns(tasks),
    }


def load_delta(before: dict[str, Any], after: dict[str, Any], own_bytes: int) -> dict[str, Any] | None:
    """What else the host did while the probe measured: the interface's bytes that were not the probe's
    (``other_gbps``), the cores busy with other work (``cpu_other``, a share of all) and stolen (``cpu_steal``),
    the share of the time some task waited for a CPU (``cpu_pressure``, PSI) and how long the probe's own
    threads waited to run (``sched_delay_ms``; ``sched_wait``, that as a share of the time, at most 1)."""
    seconds = after["t"] - before["t"]
    if seconds <= 0:
        return None
    out: dict[str, Any] = {"seconds": round(seconds, 3)}
    if before["nic"] is not None and after["nic"] is not None:
        other = max(0, after["nic"] - before["nic"] - own_bytes)
        out.update(
            nic_bytes=after["nic"] - before["nic"], own_bytes=own_bytes, other_gbps=round(other / seconds / 1e9, 6)
        )
    if before["cpu"] and after["cpu"]:
        total = after["cpu"][0] - before["cpu"][0]
        if total > 0:
            ticks = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
            cores = os.cpu_count() or 1
            busy_s = (total - (after["cpu"][1] - before["cpu"][1])) / ticks
            own_s = after["own_cpu_s"] - before["own_cpu_s"]
            out["cpu_other"] = round(min(1.0, max(0.0, (busy_s - own_s) / (seconds * cores))), 3)
            out["cpu_steal"] = round((after["cpu"][2] - before["cpu"][2]) / total, 3)
    if before.get("psi_us") is not None and after.get("psi_us") is not None:
        out["cpu_pressure"] = round(min(1.0, max(0, after["psi_us"] - before["psi_us"]) / (seconds * 1e6)), 3)
    if before.get("wait_ns") is not None and after.get("wait_ns") is not None:
        waited = max(0, after["wait_ns"] - before["wait_ns"])
        out["sched_delay_ms"] = round(waited / 1e6, 3)
        out["sched_wait"] = round(min(1.0, waited / (seconds * 1e9)), 3)
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
