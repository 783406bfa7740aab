"""Network facts of this host: interfaces, the route towards a peer, who holds a port.

Pure standard library (no psutil): `ip -j addr` when iproute2 is installed, /sys
and ioctl otherwise; /proc/net/tcp for port owners. Each reader takes its
source (a command runner, a /proc root) as a parameter so tests can feed
recorded files.
"""

from __future__ import annotations

import fcntl
import ipaddress
import json
import os
import socket
import struct
import subprocess
from collections.abc import Callable
from typing import Any, TypedDict

from agents import run_tool

SIOCGIFADDR = 0x8915

# subprocess.run or a stand-in that returns recorded output.
Runner = Callable[..., "subprocess.CompletedProcess[str]"]


class Interface(TypedDict):
    name: str
    up: bool
    loopback: bool
    mtu: int | None
    addresses: list[str]


class Candidate(TypedDict):
    name: str
    address: str
    loopback: bool


def _ip_json(run: Runner = subprocess.run) -> list[dict[str, Any]] | None:
    try:
        out = run_tool("ip", ["-j", "addr", "show"], 5, run)
        return json.loads(out.stdout) if out is not None and out.returncode == 0 else None
    except (OSError, ValueError, subprocess.TimeoutExpired):
        return None


def _ioctl_ipv4(name: str) -> str | None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            packed = fcntl.ioctl(s.fileno(), SIOCGIFADDR, struct.pack("256s", name.encode()[:15]))
        except OSError:
            return None
    return socket.inet_ntoa(packed[20:24])


def _sysfs_interfaces(sys_root: str = "/sys/class/net") -> list[Interface]:
    found: list[Interface] = []
    for _, name in socket.if_nameindex():
        base = os.path.join(sys_root, name)

        def read(leaf: str, default: str = "", base: str = base) -> str:
            try:
                with open(os.path.join(base, leaf)) as f:
                    return f.read().strip()
            except OSError:
                return default

        flags = int(read("flags", "0") or "0", 16)
        addr = _ioctl_ipv4(name)
        found.append(
            {
                "name": name,
                "up": bool(flags & 0x1),
                "loopback": bool(flags & 0x8),
                "mtu": int(read("mtu", "0") or 0),
                "addresses": [addr] if addr else [],
            }
        )
    return found


def interfaces(run: Runner = subprocess.run) -> list[Interface]:
    """Every interface as {name, up, loopback, mtu, addresses} (addresses without prefix length)."""
    data = _ip_json(run)
    if data is None:
        return _sysfs_interfaces()
    found: list[Interface] = []
    for entry in data:
        flags = entry.get("flags") or []
        found.append(
            {
                "name": entry.get("ifname", ""),
                "up": "UP" in flags,
                "loopback": "LOOPBACK" in flags,
                "mtu": entry.get("mtu"),
                "addresses": [a["local"] for a in entry.get("addr_info") or [] if a.get("local")],
            }
        )
    return found


def is_loopback(address: str) -> bool:
    try:
        return ipaddress.ip_address(address.split("%")[0]).is_loopback
    except ValueError:
        return False


def source_address_towards(host: str, port: int = 9) -> str:
    """The local address the kernel would use to reach host (no packet is sent: a UDP connect only picks a route)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_DGRAM) as s:
        s.connect((host, port))
        local: str = s.getsockname()[0]
        return local


def interface_of(address: str, found: list[Interface] | None = None) -> str | None:
    """Name of the interface that carries address, or None."""
    for iface in found if found is not None else interfaces():
        if address in iface["addresses"]:
            return iface["name"]
    return None


def route_to(peer_ip: str, found: list[Interface] | None = None) -> tuple[str | None, str]:
    """(interface name, local address) this host uses to reach peer_ip."""
    local = source_address_towards(peer_ip)
    return interface_of(local, found), local


def candidate_interfaces(include_loopback: bool, found: list[Interface] | None = None) -> list[Candidate]:
    """Interfaces that are up and carry an IPv4 address; loopback only when asked."""
    out: list[Candidate] = []
    for iface in found if found is not None else interfaces():
        v4 = [a for a in iface["addresses"] if ":" not in a]
        if iface["up"] and v4 and (include_loopback or not iface["loopback"]):
            out.append({"name": iface["name"], "address": v4[0], "loopback": iface["loopback"]})
    return out


def _listening_inodes(port: int, proc_root: str) -> set[str]:
    inodes = set()
    for table in ("net/tcp", "net/tcp6"):
        try:
            with open(os.path.join(proc_root, table)) as f:
                next(f, None)
                for line in f:
                    cols = line.split()
                    if len(cols) > 9 and cols[3] == "0A" and int(cols[1].rsplit(":", 1)[1], 16) == port:
                        inodes.add(cols[9])
        except OSError:
            continue
    return inodes


def port_holder(port: int, proc_root: str = "/proc") -> str | None:
    """'pid 123 (redis-server)' for the process listening on TCP port, 'a socket' if not ours to see, or None."""
    inodes = _listening_inodes(port, proc_root)
    if not inodes:
        return None
    targets = {f"socket:[{i}]" for i in inodes}
    for pid in filter(str.isdigit, os.listdir(proc_root)):
        fd_dir = os.path.join(proc_root, pid, "fd")
        try:
            fds = os.listdir(fd_dir)
        except OSError:
            continue
        for fd in fds:
            try:
                if os.readlink(os.path.join(fd_dir, fd)) in targets:
                    with open(os.path.join(proc_root, pid, "comm")) as f:
                        return f"pid {pid} ({f.read().strip()})"
            except OSError:
                continue
    return "a process this agent cannot inspect"


def ifname_setting_problem(variable: str, value: str, found: list[Interface] | None = None) -> str | None:
    """Why GLOO_SOCKET_IFNAME / NCCL_SOCKET_IFNAME would not work on this host, or None.

    Gloo takes exact names separated by commas; NCCL takes prefixes, '=' for an
    exact name and '^' to exclude (an exclusion list cannot name a missing NIC).
    """
    names = {i["name"] for i in (found if found is not None else interfaces()) if i["up"]}
    value = value.strip()
    if not value or value.startswith("^"):
        return None
    exact = variable.startswith("GLOO") or value.startswith("=")
    wanted = [w for w in value.lstrip("=").split(",") if w]
    missing = [w for w in wanted if (w not in names if exact else not any(n.startswith(w) for n in names))]
    if len(missing) == len(wanted) or (exact and missing):
        return (
            f"{variable}={value} names {', '.join(missing)}, which is not an interface that is up on this host "
            f"(up: {', '.join(sorted(names)) or 'none'})"
        )
    return None
