"""The resolve stage: a name to an IPv4 address within the stage's timeout, and the interface toward the peer.

pick_interface also pins GLOO/NCCL_SOCKET_IFNAME to that interface (pair, group and
discover probes) unless the command's launch variables set them; a preflight leaves
the job's own defaults alone and records what Gloo binds without them.
"""

from __future__ import annotations

import os
import socket
import threading
from typing import Any

from agents import netinfo
from agents.probe.errors import StageFailure
from agents.probe.hints import timeout_hint
from agents.probe.preflight import gloo_default_address
from agents.probe.state import ProbeState


def resolve(p: ProbeState, host: str) -> str:
    box: dict[str, Any] = {}

    def lookup() -> None:
        try:
            box["ip"] = socket.getaddrinfo(host, None, socket.AF_INET, socket.SOCK_STREAM)[0][4][0]
        except OSError as e:
            box["error"] = e

    worker = threading.Thread(target=lookup, daemon=True)
    worker.start()
    worker.join(p.t["resolve"])
    if "ip" in box:
        return str(box["ip"])
    if "error" in box:
        raise StageFailure(
            "dns",
            f"{p.name} could not resolve {host!r}: {box['error']}; check the name, DNS and /etc/hosts on this host",
            detail=str(box["error"]),
        )
    raise StageFailure("dns", timeout_hint(p, "resolve", p.t["resolve"]), status="timeout")


def pick_interface(p: ProbeState, local_ip: str | None, toward: str | None) -> None:
    found = netinfo.interfaces()
    try:
        if local_ip and local_ip not in ("0.0.0.0", "::"):
            p.interface = netinfo.interface_of(local_ip, found)
        if p.interface is None and toward:
            p.interface, _ = netinfo.route_to(toward, found)
    except OSError:
        p.interface = None
    mtu = next((i.get("mtu") for i in found if i["name"] == p.interface), None)
    p.evidence.update(interface=p.interface, mtu=mtu, peer_address=p.peer_ip)
    kind = p.cmd["kind"]
    for var in ("GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME"):
        if var in p.cmd["env"]:
            continue
        if kind != "preflight" and p.interface:
            os.environ[var] = p.interface
        elif kind == "preflight":
            os.environ.pop(var, None)
    if kind == "preflight":
        p.interface = os.environ.get("GLOO_SOCKET_IFNAME") or None
        p.extra["gloo_default"] = gloo_default_address()


def peer_ip_of(address: str | None) -> str | None:
    """The peer's IPv4 address for reading socket tables; None if it does not resolve at once."""
    if not address:
        return None
    try:
        return str(socket.getaddrinfo(address, None, socket.AF_INET, socket.SOCK_STREAM)[0][4][0])
    except OSError:
        return None
