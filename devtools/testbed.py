"""A multi-host test bed on one machine: network namespaces joined by a bridge.

Each host is a network namespace with its own address, its own hosts file
(`ip netns exec` bind-mounts /etc/netns/<ns>/hosts over /etc/hosts), its own
hostname (a UTS namespace per process) and one agent. The bridge lives in a
namespace of its own, so nothing touches the machine's own network. Agents
reach the broker through Redis's unix socket (the file system is shared), so
the faults injected on the test network hit the probes, not the control path.

Faults are real kernel state: nftables rules, tc qdiscs, hosts-file lines,
interfaces. `TestBed.close()` removes everything, and `cleanup_stale()` removes
what an interrupted run left behind. Needs root, iproute2 and nftables.
No Django import at module level.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from devtools.devstack import (
    ROOT,
    STARTUP_ERRORS,
    create_admin_login,
    python_env,
    refused,
    spawn,
    stack_env,
    stop_process,
)
from devtools.devstack import _manage as manage

if TYPE_CHECKING:
    import argparse

    from devtools.devstack import Supervisor

PREFIX = "chtb"  # every namespace and /etc/netns entry this module makes starts with it
NETNS_ETC = Path("/etc/netns")
SUBNET = "198.18.0"  # RFC 2544 benchmarking range, only ever inside our own namespaces
DEAD_SUBNET = "198.18.1"
DEFAULT_MTU = 1500
DEFAULT_GSO_MAX = 65536


class TestBedUnavailable(RuntimeError):
    """Namespaces cannot be made here (not root, no iproute2/nftables, or forbidden)."""


def sh(*args: str, check: bool = True, timeout: float = 20.0, input: str | None = None) -> str:
    out = subprocess.run(list(args), capture_output=True, text=True, timeout=timeout, input=input)
    if check and out.returncode != 0:
        raise RuntimeError(f"{' '.join(args)}: exit {out.returncode}: {out.stderr.strip()}")
    return out.stdout


def available() -> str | None:
    """None when a test bed can be built here, else the reason it cannot."""
    if os.geteuid() != 0:
        return "the test bed needs root (network namespaces, nftables, tc)"
    for tool in ("ip", "nft", "tc"):
        if not shutil.which(tool):
            return f"{tool} is not installed (scripts/setup --with-netns installs iproute2 and nftables)"
    name = f"{PREFIX}-probe-{os.getpid()}"
    try:
        sh("ip", "netns", "add", name)
        sh("ip", "netns", "del", name)
    except (RuntimeError, subprocess.TimeoutExpired) as exc:
        return f"network namespaces are not permitted here: {exc}"
    return None


def cleanup_stale(prefix: str = PREFIX) -> list[str]:
    """Remove namespaces and /etc/netns entries left by an earlier, interrupted run."""
    removed = []
    for line in sh("ip", "netns", "list", check=False).splitlines():
        name = line.split()[0] if line.strip() else ""
        if name.startswith(prefix + "-"):
            _kill_namespace_pids(name)
            sh("ip", "netns", "del", name, check=False)
            removed.append(name)
    if NETNS_ETC.is_dir():
        for entry in NETNS_ETC.glob(prefix + "-*"):
            shutil.rmtree(entry, ignore_errors=True)
    return removed


def _kill_namespace_pids(ns: str) -> None:
    pids = sh("ip", "netns", "pids", ns, check=False).split()
    for pid in pids:
        try:
            os.kill(int(pid), signal.SIGKILL)
        except (ProcessLookupError, ValueError):
            pass


@dataclass
class Host:
    """One test host: a namespace, its hostname, its addresses, its agent."""

    index: int
    ns: str
    name: str
    address: str
    dead_address: str | None = None
    agent: subprocess.Popen[bytes] | None = None
    extra_hosts: dict[str, str] = field(default_factory=dict)  # name -> address overrides


class TestBed:
    """K hosts in network namespaces on one bridge, each able to run an agent."""

    def __init__(
        self,
        hosts: int = 6,
        workdir: Path | None = None,
        tag: str | None = None,
        names: list[str] | None = None,
        second_interface: bool = False,
        racks: int = 0,
        uplink_mbit: float | None = None,
    ) -> None:
        if not 2 <= hosts <= 60:
            raise ValueError("hosts: between 2 and 60")
        if racks and not 2 <= racks <= hosts:
            raise ValueError("racks: between 2 and the number of hosts (0: one bridge for all)")
        if uplink_mbit is not None and (not racks or uplink_mbit <= 0):
            raise ValueError("uplink_mbit: a positive rate, and only with racks")
        self.tag = tag or uuid.uuid4().hex[:6]
        self.workdir = Path(workdir or (ROOT / "var" / f"testbed-{self.tag}"))
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.bridge_ns = f"{PREFIX}-{self.tag}-br"
        names = names or [f"host{i + 1}" for i in range(hosts)]
        self.hosts = [
            Host(
                i,
                f"{PREFIX}-{self.tag}-h{i + 1}",
                names[i],
                f"{SUBNET}.{10 + i}",
                f"{DEAD_SUBNET}.{10 + i}" if second_interface else None,
            )
            for i in range(hosts)
        ]
        self.second_interface = second_interface
        # Two tiers: rack k (0-based) is bridge r<k+1>, its hosts the k-th contiguous share; each rack's uplink
        # is one veth pair u<k+1> (on the rack's bridge) - s<k+1> (on the spine bridge), tbf-shaped both ways.
        self.racks = racks
        self.uplink_mbit = uplink_mbit
        self.rack_of: dict[str, int] = {h.name: h.index * racks // hosts for h in self.hosts} if racks else {}
        self.broker_url: str | None = None  # what restart_detached_agent starts agents with
        self.agent_env: dict[str, str] = {}
        self._built = False

    # building and tearing down

    def build(self) -> TestBed:
        reason = available()
        if reason:
            raise TestBedUnavailable(reason)
        try:
            sh("ip", "netns", "add", self.bridge_ns)
            self._in(self.bridge_ns, "ip", "link", "set", "lo", "up")
            self._in(self.bridge_ns, "ip", "link", "add", "br0", "type", "bridge")
            self._in(self.bridge_ns, "ip", "link", "set", "br0", "up")
            if self.racks:
                self._build_racks()
            for host in self.hosts:
                self._build_host(host)
            self._built = True
        except BaseException:
            self.close()
            raise
        return self

    def _build_host(self, host: Host) -> None:
        sh("ip", "netns", "add", host.ns)
        self._in(host.ns, "ip", "link", "set", "lo", "up")
        self._plug(host, "eth0", f"v{host.index}", self._bridge_of(host.name), host.address)
        if host.dead_address:
            self.add_dead_interface(host.name)
        self.write_hosts_file(host)

    def _plug(self, host: Host, ifname: str, port: str, bridge: str, address: str) -> None:
        """A veth pair: ``ifname`` in the host, up with ``address``/24; ``port`` on the bridge namespace's ``bridge``."""
        self._in(host.ns, "ip", "link", "add", ifname, "type", "veth", "peer", "name", port, "netns", self.bridge_ns)
        self._in(self.bridge_ns, "ip", "link", "set", port, "master", bridge, "up")
        self._in(host.ns, "ip", "addr", "add", f"{address}/24", "dev", ifname)
        self._in(host.ns, "ip", "link", "set", ifname, "up")

    def _build_racks(self) -> None:
        """The rack bridges and the spine (bridge ``br0``, which then holds no host), each rack joined to it by
        its uplink, shaped to ``uplink_mbit`` where given."""
        for k in range(1, self.racks + 1):
            self._in(self.bridge_ns, "ip", "link", "add", f"r{k}", "type", "bridge")
            self._in(self.bridge_ns, "ip", "link", "set", f"r{k}", "up")
            self._in(self.bridge_ns, "ip", "link", "add", f"u{k}", "type", "veth", "peer", "name", f"s{k}")
            self._in(self.bridge_ns, "ip", "link", "set", f"u{k}", "master", f"r{k}", "up")
            self._in(self.bridge_ns, "ip", "link", "set", f"s{k}", "master", "br0", "up")
            if self.uplink_mbit is not None:
                for port in (f"u{k}", f"s{k}"):  # each direction's egress: out of the rack, and into it
                    self._tbf(self.bridge_ns, port, self.uplink_mbit)

    def _tbf(self, ns: str, dev: str, rate_mbit: float, burst_kb: int = 64, latency_ms: int = 50) -> None:
        self._in(
            ns,
            "tc",
            "qdisc",
            "replace",
            "dev",
            dev,
            "root",
            "tbf",
            "rate",
            f"{rate_mbit}mbit",
            "burst",
            f"{burst_kb}kb",
            "latency",
            f"{latency_ms}ms",
        )

    def _bridge_of(self, name: str) -> str:
        return f"r{self.rack_of[name] + 1}" if self.racks else "br0"

    def rack_name(self, name: str) -> str:
        """The rack a host is cabled to now: ``rack1`` ... (a moved host's new one)."""
        return f"rack{self.rack_of[name] + 1}"

    def move_host(self, name: str, rack: int) -> None:
        """Move the host's cable to rack ``rack`` (1-based) of a two-tier bed: its port joins that rack's bridge.

        Its address and name stay, so whatever labels it (a declared topology) now says the wrong rack.
        """
        if not self.racks or not 1 <= rack <= self.racks:
            raise ValueError(f"rack: 1 to {self.racks} on a bed built with racks")
        host = self.host(name)
        self._in(self.bridge_ns, "ip", "link", "set", f"v{host.index}", "master", f"r{rack}")
        self.rack_of[name] = rack - 1

    def write_hosts_file(self, host: Host, self_address: str | None = None) -> None:
        """The host's /etc/hosts: every test host by name, its own name on its own address."""
        lines = ["127.0.0.1 localhost", "::1 localhost ip6-localhost ip6-loopback"]
        for other in self.hosts:
            addr = host.extra_hosts.get(other.name) or (
                self_address if other is host and self_address else other.address
            )
            lines.append(f"{addr} {other.name}")
        for name, addr in host.extra_hosts.items():
            if name not in {h.name for h in self.hosts}:
                lines.append(f"{addr} {name}")
        etc = NETNS_ETC / host.ns
        etc.mkdir(parents=True, exist_ok=True)
        (etc / "hosts").write_text("\n".join(lines) + "\n")
        (etc / "hostname").write_text(host.name + "\n")

    def close(self) -> None:
        for host in self.hosts:
            if host.agent is not None:
                stop_process(host.agent, timeout=5)
                host.agent = None
        for ns in [h.ns for h in self.hosts] + [self.bridge_ns]:
            _kill_namespace_pids(ns)
            sh("ip", "netns", "del", ns, check=False)
            shutil.rmtree(NETNS_ETC / ns, ignore_errors=True)
        self._built = False

    def __enter__(self) -> TestBed:
        return self.build()

    def __exit__(self, *exc: object) -> None:
        self.close()

    # running things inside a host

    def _in(self, ns: str, *args: str, check: bool = True, timeout: float = 20.0) -> str:
        return sh("ip", "netns", "exec", ns, *args, check=check, timeout=timeout)

    def host(self, name: str) -> Host:
        for h in self.hosts:
            if h.name == name:
                return h
        raise KeyError(name)

    def exec_args(self, host: Host, args: list[str]) -> list[str]:
        """Run `args` inside the host: its network namespace, hosts file and own hostname."""
        return [
            "ip",
            "netns",
            "exec",
            host.ns,
            "unshare",
            "--uts",
            "sh",
            "-c",
            'hostname "$0"; exec "$@"',
            host.name,
            *args,
        ]

    def run(self, name: str, *args: str, check: bool = True, timeout: float = 30.0) -> str:
        return sh(*self.exec_args(self.host(name), list(args)), check=check, timeout=timeout)

    def start_in(self, name: str, args: list[str], **popen: Any) -> subprocess.Popen[Any]:
        """A process inside the host (its namespace, hosts file and hostname), in its own session; not waited for.

        ``popen``: more Popen arguments; with ``text=True`` its pipes carry str, otherwise bytes.
        """
        return subprocess.Popen(
            self.exec_args(self.host(name), args), env=python_env(), start_new_session=True, **popen
        )

    def key_file(self, name: str) -> Path:
        """Where a host's agent key lives (written by `manage.py enroll --out WORKDIR/keys`)."""
        return self.workdir / "keys" / f"{name}.key"

    def start_agent(
        self,
        name: str,
        broker_url: str,
        env: dict[str, str] | None = None,
        address: str | None = None,
        key_file: Path | None = None,
    ) -> subprocess.Popen[bytes]:
        host = self.host(name)
        if host.agent is not None and host.agent.poll() is None:
            raise RuntimeError(f"the agent on {name} is already running")
        args = [sys.executable, "-m", "agents", "run", "--name", host.name, "--broker", broker_url]
        if address:
            args += ["--address", address]
        key_file = key_file or self.key_file(name)
        if key_file.exists():
            args += ["--key-file", str(key_file)]
        host.agent = spawn(self.exec_args(host, args), self.workdir / f"agent-{host.name}.log", env=env or python_env())
        return host.agent

    def stop_agent(self, name: str, sig: int = signal.SIGTERM) -> None:
        host = self.host(name)
        if host.agent is not None:
            stop_process(host.agent, timeout=5, sig=sig)
            host.agent = None

    def agent_log(self, name: str) -> str:
        path = self.workdir / f"agent-{name}.log"
        return path.read_text(errors="replace") if path.exists() else ""

    # faults

    def _nft_load(self, ns: str, rules: str) -> None:
        """Load an nft ruleset (tables, chains, rules) in the namespace."""
        sh("ip", "netns", "exec", ns, "nft", "-f", "-", input=rules)

    def _nft_delete(self, ns: str, family: str, table: str) -> None:
        """Remove one of the namespace's nft tables, and with it its rules; nothing happens where it is gone."""
        sh("ip", "netns", "exec", ns, "nft", "delete", "table", family, table, check=False)

    def drop(self, src: str, dst: str) -> None:
        """Drop every packet from src to dst, on dst's input (a firewall on dst)."""
        d = self.host(dst)
        table = f"chf_{self.host(src).index}"
        rules = (
            f"table inet {table} {{\n"
            f"  chain input {{ type filter hook input priority 0; policy accept;\n"
            f"    ip saddr {self.host(src).address} drop\n  }}\n}}\n"
        )
        self._nft_load(d.ns, rules)

    def undrop(self, src: str, dst: str) -> None:
        self._nft_delete(self.host(dst).ns, "inet", f"chf_{self.host(src).index}")

    def firewall_between(self, a: str, b: str) -> None:
        self.drop(a, b)
        self.drop(b, a)

    def heal(self, a: str, b: str) -> None:
        self.undrop(a, b)
        self.undrop(b, a)

    def shape(self, name: str, rate_mbit: float, burst_kb: int = 64, latency_ms: int = 50) -> None:
        """Limit the host's egress with a token bucket filter (tc tbf)."""
        self._tbf(self.host(name).ns, "eth0", rate_mbit, burst_kb, latency_ms)

    def unshape(self, name: str) -> None:
        self._in(self.host(name).ns, "tc", "qdisc", "del", "dev", "eth0", "root", check=False)

    def lose(self, name: str, percent: float) -> None:
        """Lose a share of the frames the host sends, at random, on its port of the bridge: a flaky cable or optic.

        An nft rule in the bridge's namespace (bridge family, numgen random), so the host's own
        stack sees real loss and retransmits, as it would behind a bad cable.
        """
        host = self.host(name)
        per_mille = int(round(percent * 10))
        rules = (
            f"table bridge chloss_{host.index} {{\n chain forward {{\n"
            f"  type filter hook forward priority 0; policy accept;\n"
            f'  iifname "v{host.index}" numgen random mod 1000 < {per_mille} drop\n }}\n}}\n'
        )
        self._nft_load(self.bridge_ns, rules)

    def unlose(self, name: str) -> None:
        self._nft_delete(self.bridge_ns, "bridge", f"chloss_{self.host(name).index}")

    def set_mtu(self, name: str, mtu: int) -> None:
        """The MTU of the host's eth0; its port on the bridge keeps its own (a path of another MTU).

        Segmentation offload is capped at one frame while the MTU is not the default: a veth
        lets offloaded (GSO) packets past any MTU, as a real NIC that segments in hardware would
        not, so without the cap a jumbo frame would never meet the smaller path.
        """
        gso = str(mtu) if mtu != DEFAULT_MTU else str(DEFAULT_GSO_MAX)
        self._in(self.host(name).ns, "ip", "link", "set", "dev", "eth0", "mtu", str(mtu), "gso_max_size", gso)

    def _nft_table(self, name: str, table: str, rule: str) -> None:
        rules = (
            f"table inet {table} {{\n  chain input {{ type filter hook input priority 0; policy accept;\n"
            f"    {rule}\n  }}\n}}\n"
        )
        self._nft_load(self.host(name).ns, rules)

    def drop_large(self, src: str, dst: str, max_bytes: int) -> None:
        """On dst, drop packets from src larger than max_bytes (a switch that drops large frames)."""
        self._nft_table(
            dst, f"chl_{self.host(src).index}", f"ip saddr {self.host(src).address} meta length > {max_bytes} drop"
        )

    def undrop_large(self, src: str, dst: str) -> None:
        self._nft_delete(self.host(dst).ns, "inet", f"chl_{self.host(src).index}")

    def block_inbound(self, name: str, stateful: bool = True) -> None:
        """The host accepts no new inbound TCP connection on eth0 and still connects out.

        stateful: conntrack drops new connections (replies to its own stay allowed); otherwise a
        stateless rule drops every incoming SYN that is not a SYN-ACK.
        """
        rule = 'iifname "eth0" ct state new drop' if stateful else 'iifname "eth0" tcp flags & (syn | ack) == syn drop'
        self._nft_table(name, "chin", rule)

    def unblock_inbound(self, name: str) -> None:
        self._nft_delete(self.host(name).ns, "inet", "chin")

    def add_dead_interface(self, name: str) -> str:
        """Give the host a second NIC, eth1, on a network where every packet is lost; returns its address.

        eth1 is up with carrier and an address of its own subnet, but its bridge (br1) is
        down: a Gloo or NCCL that binds it waits for peers that never answer.
        """
        host = self.host(name)
        host.dead_address = host.dead_address or f"{DEAD_SUBNET}.{10 + host.index}"
        if "br1" not in self._in(self.bridge_ns, "ip", "-br", "link", "show"):
            self._in(self.bridge_ns, "ip", "link", "add", "br1", "type", "bridge")
        self._plug(host, "eth1", f"w{host.index}", "br1", host.dead_address)
        return host.dead_address

    def remove_dead_interface(self, name: str) -> None:
        host = self.host(name)
        self._in(host.ns, "ip", "link", "del", "eth1", check=False)  # takes its peer on the bridge with it
        host.dead_address = None

    def resolve_to_loopback(self, name: str) -> None:
        """The host's own hostname resolves to 127.0.1.1, as Debian's installer writes it."""
        self.write_hosts_file(self.host(name), self_address="127.0.1.1")

    def misresolve(self, on: str, peer: str, address: str) -> None:
        """On host `on`, the name `peer` resolves to `address`."""
        host = self.host(on)
        host.extra_hosts[peer] = address
        self.write_hosts_file(host)

    def clear_misresolve(self, on: str, peer: str) -> None:
        host = self.host(on)
        host.extra_hosts.pop(peer, None)
        self.write_hosts_file(host)

    def restart_detached_agent(self, name: str) -> None:
        """Restart a host's agent from a separate command (`scripts/testbed`; no handle to the old one)."""
        host = self.host(name)
        _kill_namespace_pids(host.ns)
        if self.broker_url is None:
            raise TestBedUnavailable("the bed's broker URL is unknown: bring the bed up with scripts/testbed first")
        self.start_agent(name, self.broker_url, env=python_env(**self.agent_env), address=host.address)
        host.agent = None  # detached: the namespace teardown stops it

    def faults(self, name: str) -> list[str]:
        """The faults in force on a host, read back from the kernel and its hosts file."""
        host = self.host(name)
        by_index = {h.index: h.name for h in self.hosts}
        found = []
        for line in self._in(host.ns, "nft", "list", "tables", check=False).splitlines():
            table = line.split()[-1] if line.strip() else ""
            if table.startswith("chf_") and table[4:].isdigit():
                found.append(f"drop from {by_index.get(int(table[4:]), 'host #' + table[4:])}")
        for line in self._in(host.ns, "nft", "list", "tables", check=False).splitlines():
            table = line.split()[-1] if line.strip() else ""
            if table == "chin":
                found.append("inbound connections blocked")
            elif table.startswith("chl_") and table[4:].isdigit():
                found.append(f"large packets from {by_index.get(int(table[4:]), 'host #' + table[4:])} dropped")
        bridge_tables = self._in(self.bridge_ns, "nft", "list", "tables", check=False).split()
        if f"chloss_{host.index}" in bridge_tables:
            found.append("losing frames on its bridge port")
        qdisc = self._in(host.ns, "tc", "qdisc", "show", "dev", "eth0", check=False)
        if " tbf " in qdisc:
            rate = qdisc.split(" rate ", 1)[1].split()[0] if " rate " in qdisc else "?"
            found.append(f"shaped to {rate}")
        if self._in(host.ns, "ip", "-br", "addr", "show", "dev", "eth1", check=False).strip():
            found.append("dead-nic eth1")
        hosts_file = NETNS_ETC / host.ns / "hosts"
        lines = hosts_file.read_text().splitlines() if hosts_file.exists() else []
        for line in lines[2:]:
            addr, _, who = line.partition(" ")
            if who == host.name and addr != host.address:
                found.append(f"own name -> {addr}")
            elif who != host.name and (who not in by_index.values() or addr != self.host(who).address):
                found.append(f"{who} -> {addr}")
        if not any("agents" in cmd and "run" in cmd for cmd in self._namespace_commands(host)):
            found.append("agent stopped")
        return found

    def _namespace_commands(self, host: Host) -> list[list[str]]:
        return [_cmdline(int(pid)) for pid in sh("ip", "netns", "pids", host.ns, check=False).split()]

    def interfaces(self, name: str) -> list[dict[str, Any]]:
        found: list[dict[str, Any]] = json.loads(self._in(self.host(name).ns, "ip", "-j", "addr"))
        return found

    def interface_of(self, name: str) -> str:
        """The host's interface that holds its address (what GLOO_SOCKET_IFNAME names for a job on it)."""
        address = self.host(name).address
        return next(
            str(i["ifname"])
            for i in self.interfaces(name)
            if any(a.get("local") == address for a in i.get("addr_info") or [])
        )

    def iperf3_mbit(self, client: str, server: str, seconds: float = 3.0) -> float:
        """Throughput from client to server measured by iperf3 on the same link."""
        s = self.host(server)
        port = 5201
        srv = subprocess.Popen(
            ["ip", "netns", "exec", s.ns, "iperf3", "-s", "-1", "-p", str(port)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        try:
            deadline = time.monotonic() + 5
            out: dict[str, Any] | None = None
            while time.monotonic() < deadline:
                res = subprocess.run(
                    [
                        "ip",
                        "netns",
                        "exec",
                        self.host(client).ns,
                        "iperf3",
                        "-c",
                        s.address,
                        "-p",
                        str(port),
                        "-t",
                        str(seconds),
                        "-J",
                    ],
                    capture_output=True,
                    text=True,
                    timeout=seconds + 20,
                )
                try:
                    report = json.loads(res.stdout)
                except ValueError:
                    report = {}
                # Before the server listens the client fails, or (racing its start) ends without a summary.
                if res.returncode == 0 and "sum_received" in report.get("end", {}):
                    out = report
                    break
                time.sleep(0.2)
            if out is None:
                raise RuntimeError(f"iperf3 from {client} to {server} failed")
            bits_per_second: float = out["end"]["sum_received"]["bits_per_second"]
            return bits_per_second / 1e6
        finally:
            stop_process(srv, timeout=3)


# `scripts/testbed`: a running bed for people exploring, and faults injected into it by name.

# Where a running bed keeps its Redis, database, logs and state file.
TESTBED_DIR = Path(os.environ.get("CLUSTER_HEALTH_TESTBED_DIR") or ROOT / "var" / "testbed")
STATE_FILE = TESTBED_DIR / "state.json"
FAULTS: dict[str, tuple[str, Callable[..., Any], Callable[..., Any]]] = {
    # name: (arguments, inject, clear)
    "drop": ("SRC DST", lambda bed, a, b: bed.drop(a, b), lambda bed, a, b: bed.undrop(a, b)),
    "firewall": ("A B", lambda bed, a, b: bed.firewall_between(a, b), lambda bed, a, b: bed.heal(a, b)),
    "shape": ("HOST MBIT", lambda bed, h, mbit: bed.shape(h, float(mbit)), lambda bed, h, *_: bed.unshape(h)),
    "loopback": (
        "HOST",
        lambda bed, h: (bed.resolve_to_loopback(h), bed.restart_detached_agent(h)),
        lambda bed, h: (bed.write_hosts_file(bed.host(h)), bed.restart_detached_agent(h)),
    ),
    "misresolve": (
        "ON PEER ADDRESS",
        lambda bed, on, peer, addr: bed.misresolve(on, peer, addr),
        lambda bed, on, peer, *_: bed.clear_misresolve(on, peer),
    ),
    "stop-agent": (
        "HOST",
        lambda bed, h: _kill_namespace_pids(bed.host(h).ns),
        lambda bed, h: bed.restart_detached_agent(h),
    ),
    "dead-nic": ("HOST", lambda bed, h: bed.add_dead_interface(h), lambda bed, h: bed.remove_dead_interface(h)),
}


def save_state(
    bed: TestBed,
    broker_url: str,
    agent_env: dict[str, str],
    web_url: str,
    procs: dict[str, subprocess.Popen[bytes]] | None = None,
) -> None:
    STATE_FILE.parent.mkdir(parents=True, exist_ok=True)
    STATE_FILE.write_text(
        json.dumps(
            {
                "tag": bed.tag,
                "hosts": [h.name for h in bed.hosts],
                "second_interface": bed.second_interface,
                "workdir": str(bed.workdir),
                "broker_url": broker_url,
                "agent_env": agent_env,
                "web_url": web_url,
                "pid": os.getpid(),
                "addresses": {h.name: h.address for h in bed.hosts},
                # The server side's processes, so that `cleanup` can stop them after the bed's own process was killed.
                "processes": {name: [p.pid, _started(p.pid)] for name, p in (procs or {}).items()},
            },
            indent=2,
        )
    )


def _cmdline(pid: int) -> list[str]:
    """The process's arguments; empty once it has exited (a zombie has none either)."""
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return []
    return raw.decode(errors="replace").rstrip("\0").split("\0") if raw else []


def _started(pid: int) -> str | None:
    """The process's start time in clock ticks since boot: with the pid, it names one process, never a reused pid."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def stop_running_bed(state_file: Path = STATE_FILE, wait_s: float = 60.0) -> list[str]:
    """Stop the bed `up` runs (as Ctrl-C does), or what is left of one whose process was killed."""
    if not state_file.exists():
        return []
    state = json.loads(state_file.read_text())
    stopped = []
    pid = state.get("pid")
    if pid and any("devtools.testbed" in arg for arg in _cmdline(pid)):
        os.kill(pid, signal.SIGTERM)  # its own teardown: agents, namespaces, server side, state file
        deadline = time.monotonic() + wait_s
        while _cmdline(pid) and time.monotonic() < deadline:
            time.sleep(0.2)
        if _cmdline(pid):
            os.kill(pid, signal.SIGKILL)
        stopped.append(f"testbed pid {pid}")
    for name, (proc_pid, started) in state.get("processes", {}).items():
        if started and _started(proc_pid) == started:
            try:
                os.killpg(proc_pid, signal.SIGKILL)
            except ProcessLookupError:
                continue
            stopped.append(f"{name} pid {proc_pid}")
    state_file.unlink(missing_ok=True)
    return stopped


def load_bed(state_file: Path = STATE_FILE) -> TestBed:
    """The running bed described by the state file `scripts/testbed` wrote."""
    if not state_file.exists():
        raise SystemExit(f"no running test bed ({state_file} is missing): start one with scripts/testbed")
    state = json.loads(state_file.read_text())
    bed = TestBed(
        len(state["hosts"]),
        workdir=Path(state["workdir"]),
        tag=state["tag"],
        names=state["hosts"],
        second_interface=state["second_interface"],
    )
    bed.broker_url, bed.agent_env = state["broker_url"], state["agent_env"]
    for host in bed.hosts:  # keep the misresolutions already injected
        etc = NETNS_ETC / host.ns / "hosts"
        if etc.exists():
            for line in etc.read_text().splitlines():
                addr, _, name = line.partition(" ")
                if name in state["addresses"] and name != host.name and addr != state["addresses"][name]:
                    host.extra_hosts[name] = addr
    return bed


def _prepare_database(env: dict[str, str], bed: TestBed) -> str:
    """Migrate, create the admin login and enrol the bed's hosts; return the login's password."""
    enroll = ["enroll", *(h.name for h in bed.hosts), "--rotate", "--out", str(bed.workdir / "keys")]
    _manage_or_fail(env, ["migrate", "--noinput"])
    password, login = create_admin_login(env)
    if login.returncode != 0:
        raise RuntimeError(f"manage.py bootstrap_user failed: {login.stderr[-2000:]}")
    _manage_or_fail(env, enroll)
    return password


def _manage_or_fail(env: dict[str, str], args: list[str]) -> None:
    out = manage(env, *args, timeout=300)
    if out.returncode != 0:
        raise RuntimeError(f"manage.py {args[0]} failed: {out.stderr[-2000:]}")


def _start_server_and_agents(
    sup: Supervisor, bed: TestBed, var: Path, port: int, socket_url: str, agent_env: dict[str, str]
) -> str:
    """Start web, worker and beat, build the namespaces with an agent in each; return the web URL once it listens."""
    from devtools.devstack import beat_args, server_worker_args, wait_for_port, web_args

    web = sup.start("web", web_args("127.0.0.1", port), restart=True)
    sup.start("worker", server_worker_args("server@testbed"), restart=True)
    sup.start("beat", beat_args(var), restart=True)
    bed.build()
    bed.broker_url, bed.agent_env = socket_url, agent_env
    for host in bed.hosts:
        bed.start_agent(host.name, socket_url, env=python_env(**agent_env), address=host.address)
    wait_for_port("127.0.0.1", port, 60, web)
    return f"http://127.0.0.1:{port}/"


def _print_bed_up(hosts: int, bed: TestBed, url: str, password: str, var: Path, redis_url: str) -> None:
    """Tell the user what is up: hosts, web login, and how to inject faults and sweep."""
    print(
        f"\n  test bed up: {hosts} hosts ({', '.join(h.name + '=' + h.address for h in bed.hosts)})\n"
        f"  open     {url}  (admin / {password})\n"
        f"  faults   python -m devtools.testbed fault drop host1 host2   (clear: ... clear drop host1 host2;"
        " status: ... status)\n"
        f"  sweep    DJANGO_SETTINGS_MODULE=cluster_health.settings CLUSTER_HEALTH_VAR_DIR={var} "
        f"REDIS_URL={redis_url} python manage.py sweep --kind connectivity --wait   (--kind discover: which NIC works)\n"
        "  Ctrl-C tears everything down.\n",
        flush=True,
    )


def _watch_bed(sup: Supervisor, bed: TestBed, socket_url: str, agent_env: dict[str, str], url: str) -> NoReturn:
    """Restart what exits on its own, every second, until a server process dies for good or a signal ends it."""
    while True:  # until Ctrl-C or SIGTERM; a server process dying ends it too
        time.sleep(1)
        for name in sup.revive():
            print(f"{name} exited and was restarted", flush=True)
            save_state(bed, socket_url, agent_env, url, sup.procs)
        dead = [name for name in list(sup.procs) if not sup.alive(name)]
        if dead:
            raise RuntimeError(f"{dead[0]} exited:\n{sup.log(dead[0])[-2000:]}")


def _up(opts: argparse.Namespace) -> int:
    from devtools.devstack import Supervisor, redis_args, wait_for_port

    reason = available()
    if reason:
        return refused("scripts/testbed", reason)
    cleanup_stale()
    var = TESTBED_DIR
    var.mkdir(parents=True, exist_ok=True)
    from devtools.devstack import free_port

    redis_port = free_port()
    redis_url = f"redis://127.0.0.1:{redis_port}/0"
    socket_url = f"redis+socket://{var / 'redis.sock'}"
    agent_env = {"CLUSTER_HEALTH_HEARTBEAT_S": "2"}
    env = stack_env(redis_url, var, **agent_env)
    sup = Supervisor(var / "logs", env)
    bed = TestBed(opts.hosts, workdir=var / "bed", tag="demo", second_interface=opts.second_interface)
    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
    # Also when started in the background by a shell, which leaves SIGINT ignored (and Python keeps
    # it so): Ctrl-C or kill -INT still tears the bed down.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        proc = sup.start("redis", redis_args(redis_port, var, var / "redis.sock"))
        wait_for_port("127.0.0.1", redis_port, 10, proc)
        password = _prepare_database(env, bed)
        url = _start_server_and_agents(sup, bed, var, opts.port, socket_url, agent_env)
        save_state(bed, socket_url, agent_env, url, sup.procs)
        _print_bed_up(opts.hosts, bed, url, password, var, redis_url)
        _watch_bed(sup, bed, socket_url, agent_env, url)
    except KeyboardInterrupt:
        return 0
    except (*STARTUP_ERRORS, TestBedUnavailable) as exc:
        return refused("scripts/testbed", exc)
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        started = time.monotonic()
        bed.close()
        closed = time.monotonic()
        sup.stop_all()
        STATE_FILE.unlink(missing_ok=True)
        took = f"hosts and agents {closed - started:.1f}s, server side {time.monotonic() - closed:.1f}s"
        print(f"test bed torn down ({took})", flush=True)


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(
        prog="python -m devtools.testbed", description="A multi-host test bed in network namespaces, and its faults."
    )
    sub = parser.add_subparsers(dest="action", required=True)
    up = sub.add_parser("up", help="build the bed with agents and the server side; Ctrl-C tears it down")
    up.add_argument("--hosts", type=int, default=6)
    up.add_argument("--port", type=int, default=8000, help="web port on 127.0.0.1")
    up.add_argument("--second-interface", action="store_true", help="give every host a second NIC on a dead network")
    for action in ("fault", "clear"):
        p = sub.add_parser(action, help=f"{'inject' if action == 'fault' else 'clear'} a fault in the running bed")
        p.add_argument("fault", choices=sorted(FAULTS), help="; ".join(f"{k} {v[0]}" for k, v in FAULTS.items()))
        p.add_argument("args", nargs="*")
    status = sub.add_parser("status", help="the running bed: hosts, addresses, and the faults in force on each")
    status.add_argument("--json", action="store_true")
    sub.add_parser(
        "cleanup",
        help="stop the running bed, or remove what an interrupted one left (namespaces, processes, state file)",
    )
    opts = parser.parse_args(argv)
    if opts.action == "up":
        return _up(opts)
    if opts.action == "cleanup":
        stopped = stop_running_bed()
        print("stopped:", ", ".join(stopped) or "nothing")
        print("removed:", " ".join(cleanup_stale()) or "nothing")
        return 0
    if opts.action == "status":
        bed = load_bed()
        state = json.loads(STATE_FILE.read_text())
        hosts = {h.name: {"address": h.address, "faults": bed.faults(h.name)} for h in bed.hosts}
        if opts.json:
            print(json.dumps({**state, "hosts": hosts}, indent=2))
            return 0
        print(f"test bed {bed.tag} (pid {state['pid']}): web {state['web_url']}, broker {state['broker_url']}")
        for name, host in hosts.items():
            print(f"  {name:<10} {host['address']:<15} {'; '.join(host['faults']) or 'no fault'}")
        return 0
    usage, inject, clear = FAULTS[opts.fault]
    if len(opts.args) < len(usage.split()) - (
        1 if opts.action == "clear" and opts.fault in ("shape", "misresolve") else 0
    ):
        parser.error(f"{opts.action} {opts.fault} {usage}")
    bed = load_bed()
    (inject if opts.action == "fault" else clear)(bed, *opts.args)
    print(f"{opts.action} {opts.fault} {' '.join(opts.args)}: done")
    return 0


if __name__ == "__main__":
    sys.exit(main())
