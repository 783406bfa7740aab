"""This node's listening TCP sockets with their owners (``ss -ltnpH``) and its addresses by interface
(``ip -j addr``): who holds a job's MASTER_PORT, what address a rank's Gloo or NCCL listens on, and
which interface a rank's connections leave by (the one GLOO_SOCKET_IFNAME should name)."""

from __future__ import annotations

import ipaddress
import json
import re
import subprocess
from pathlib import Path
from typing import Any

TIMEOUT_S = 10.0
MAX_LISTENERS = 512
_PID = re.compile(r'\("([^"]{0,32})",pid=(\d+)')


def _endpoint(text: str) -> tuple[str, int | None]:
    host, _, port = text.replace("[::ffff:", "").replace("[", "").replace("]", "").rpartition(":")
    return host, int(port) if port.isdigit() else None


def parse_listeners(text: str) -> list[dict[str, Any]]:
    """``ss -ltnpH`` as [{"address", "port", "pid", "comm"}] (one per owning process; no owner: pid None)."""
    out: list[dict[str, Any]] = []
    for line in text.splitlines():
        parts = line.split()
        if len(parts) < 4 or parts[0] != "LISTEN":
            continue
        address, port = _endpoint(parts[3])
        owners = _PID.findall(line) or [("", None)]
        for comm, pid in owners:
            out.append({"address": address, "port": port, "pid": int(pid) if pid else None, "comm": comm[:32]})
        if len(out) >= MAX_LISTENERS:
            break
    return out


def listening() -> list[dict[str, Any]]:
    """The TCP sockets listening in this network namespace, with their owners ([] if ss cannot run)."""
    try:
        run = subprocess.run(["ss", "-ltnpH"], capture_output=True, text=True, timeout=TIMEOUT_S, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return []
    return parse_listeners(run.stdout)


def interfaces() -> dict[str, str]:
    """This namespace's addresses, each with the interface that holds it ({} if ip cannot run)."""
    try:
        run = subprocess.run(["ip", "-j", "addr"], capture_output=True, text=True, timeout=TIMEOUT_S, check=False)
        found = json.loads(run.stdout or "[]")
    except (OSError, subprocess.TimeoutExpired, ValueError):
        return {}
    out = {}
    for link in found if isinstance(found, list) else []:
        if not isinstance(link, dict):
            continue
        for addr in link.get("addr_info") or []:
            if isinstance(addr, dict) and addr.get("local"):
                out[str(addr["local"])[:64]] = str(link.get("ifname"))[:32]
    return out


def is_loopback(address: str) -> bool:
    try:
        return ipaddress.ip_address(address.replace("::ffff:", "")).is_loopback
    except ValueError:
        return address == "localhost"


def is_wildcard(address: str) -> bool:
    return address in ("*", "0.0.0.0", "::", "")


def owner_uid(pid: int, proc_root: str = "/proc") -> int | None:
    try:
        return Path(proc_root, str(pid)).stat().st_uid
    except OSError:
        return None
