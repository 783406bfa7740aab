"""What the preflight kind adds: the address Gloo binds when the job sets no interface.

A preflight probe runs with the job's own launch variables and pins no interface; a
hostname that resolves to loopback is then the likely reason its group cannot form.
"""

from __future__ import annotations

import socket
from typing import Any

from agents import netinfo
from agents.probe.state import ProbeState


def gloo_default_address() -> dict[str, Any]:
    """What Gloo binds without GLOO_SOCKET_IFNAME: the address the hostname resolves to."""
    host = socket.gethostname()
    try:
        addrs = sorted({str(a[4][0]) for a in socket.getaddrinfo(host, None, socket.AF_INET)})
    except OSError:
        addrs = []
    loop = bool(addrs) and all(netinfo.is_loopback(a) for a in addrs)
    out = {"hostname": host, "resolves_to": addrs, "loopback": loop}
    if loop:
        out["note"] = (
            f"hostname {host} resolves to {', '.join(addrs)}: without GLOO_SOCKET_IFNAME Gloo binds loopback "
            "and other hosts cannot connect"
        )
    return out


def loopback_note(p: ProbeState) -> str:
    """For a preflight whose hostname resolves to loopback only, "; " and why the group cannot form; else ""."""
    if p.cmd["kind"] == "preflight" and p.extra["gloo_default"].get("loopback"):
        return f"; {p.extra['gloo_default']['note']}"
    return ""
