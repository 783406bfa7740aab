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
from dataclasses import dataclass, field
from pathlib import Path

from cluster_health.devstack import ROOT, python_env, spawn, stop_process

PREFIX = "chtb"  # every namespace and /etc/netns entry this module makes starts with it
NETNS_ETC = Path("/etc/netns")
SUBNET = "198.18.0"  # RFC 2544 benchmarking range, only ever inside our own namespaces
DEAD_SUBNET = "198.18.1"


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
    agent: subprocess.Popen | None = None
    extra_hosts: dict[str, str] = field(default_factory=dict)  # name -> address overrides


class TestBed:
    """K hosts in network namespaces on one bridge, each able to run an agent."""

    def __init__(self, hosts: int = 6, workdir: Path | None = None, tag: str | None = None,
                 names: list[str] | None = None, second_interface: bool = False):
        if not 2 <= hosts <= 60:
            raise ValueError("hosts: between 2 and 60")
        self.tag = tag or uuid.uuid4().hex[:6]
        self.workdir = Path(workdir or (ROOT / "var" / f"testbed-{self.tag}"))
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.bridge_ns = f"{PREFIX}-{self.tag}-br"
        names = names or [f"host{i + 1}" for i in range(hosts)]
        self.hosts = [
            Host(i, f"{PREFIX}-{self.tag}-h{i + 1}", names[i], f"{SUBNET}.{10 + i}",
                 f"{DEAD_SUBNET}.{10 + i}" if second_interface else None)
            for i in range(hosts)
        ]
        self.second_interface = second_interface
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
            if self.second_interface:
                # A second network whose bridge is down: every packet on it is lost.
                self._in(self.bridge_ns, "ip", "link", "add", "br1", "type", "bridge")
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
        self._in(host.ns, "ip", "link", "add", "eth0", "type", "veth", "peer", "name",
                 f"v{host.index}", "netns", self.bridge_ns)
        self._in(self.bridge_ns, "ip", "link", "set", f"v{host.index}", "master", "br0", "up")
        self._in(host.ns, "ip", "addr", "add", f"{host.address}/24", "dev", "eth0")
        self._in(host.ns, "ip", "link", "set", "eth0", "up")
        if host.dead_address:
            self._in(host.ns, "ip", "link", "add", "eth1", "type", "veth", "peer", "name",
                     f"w{host.index}", "netns", self.bridge_ns)
            self._in(self.bridge_ns, "ip", "link", "set", f"w{host.index}", "master", "br1", "up")
            self._in(host.ns, "ip", "addr", "add", f"{host.dead_address}/24", "dev", "eth1")
            self._in(host.ns, "ip", "link", "set", "eth1", "up")
        self.write_hosts_file(host)

    def write_hosts_file(self, host: Host, self_address: str | None = None) -> None:
        """The host's /etc/hosts: every test host by name, its own name on its own address."""
        lines = ["127.0.0.1 localhost", "::1 localhost ip6-localhost ip6-loopback"]
        for other in self.hosts:
            addr = host.extra_hosts.get(other.name) or (
                self_address if other is host and self_address else other.address)
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

    def __exit__(self, *exc) -> None:
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
        return ["ip", "netns", "exec", host.ns, "unshare", "--uts", "sh", "-c",
                f'hostname "$0"; exec "$@"', host.name, *args]

    def run(self, name: str, *args: str, check: bool = True, timeout: float = 30.0) -> str:
        return sh(*self.exec_args(self.host(name), list(args)), check=check, timeout=timeout)

    def start_agent(self, name: str, broker_url: str, env: dict | None = None,
                    address: str | None = None) -> subprocess.Popen:
        host = self.host(name)
        if host.agent is not None and host.agent.poll() is None:
            raise RuntimeError(f"the agent on {name} is already running")
        args = [sys.executable, "-m", "agents", "run", "--name", host.name, "--broker", broker_url]
        if address:
            args += ["--address", address]
        host.agent = spawn(self.exec_args(host, args), self.workdir / f"agent-{host.name}.log",
                           env=env or python_env())
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

    def drop(self, src: str, dst: str) -> None:
        """Drop every packet from src to dst, on dst's input (a firewall on dst)."""
        d = self.host(dst)
        table = f"chf_{self.host(src).index}"
        rules = (
            f"table inet {table} {{\n"
            f"  chain input {{ type filter hook input priority 0; policy accept;\n"
            f"    ip saddr {self.host(src).address} drop\n  }}\n}}\n"
        )
        sh("ip", "netns", "exec", d.ns, "nft", "-f", "-", input=rules)

    def undrop(self, src: str, dst: str) -> None:
        d = self.host(dst)
        sh("ip", "netns", "exec", d.ns, "nft", "delete", "table", "inet", f"chf_{self.host(src).index}",
           check=False)

    def firewall_between(self, a: str, b: str) -> None:
        self.drop(a, b)
        self.drop(b, a)

    def heal(self, a: str, b: str) -> None:
        self.undrop(a, b)
        self.undrop(b, a)

    def shape(self, name: str, rate_mbit: float, burst_kb: int = 64, latency_ms: int = 50) -> None:
        """Limit the host's egress with a token bucket filter (tc tbf)."""
        h = self.host(name)
        self._in(h.ns, "tc", "qdisc", "replace", "dev", "eth0", "root", "tbf", "rate", f"{rate_mbit}mbit",
                 "burst", f"{burst_kb}kb", "latency", f"{latency_ms}ms")

    def unshape(self, name: str) -> None:
        self._in(self.host(name).ns, "tc", "qdisc", "del", "dev", "eth0", "root", check=False)

    def resolve_to_loopback(self, name: str) -> None:
        """The host's own hostname resolves to 127.0.1.1, as Debian's installer writes it."""
        self.write_hosts_file(self.host(name), self_address="127.0.1.1")

    def misresolve(self, on: str, peer: str, address: str) -> None:
        """On host `on`, the name `peer` resolves to `address`."""
        host = self.host(on)
        host.extra_hosts[peer] = address
        self.write_hosts_file(host)

    def interfaces(self, name: str) -> list[dict]:
        return json.loads(self._in(self.host(name).ns, "ip", "-j", "addr"))

    def iperf3_mbit(self, client: str, server: str, seconds: float = 3.0) -> float:
        """Throughput from client to server measured by iperf3 on the same link."""
        s = self.host(server)
        port = 5201
        srv = subprocess.Popen(["ip", "netns", "exec", s.ns, "iperf3", "-s", "-1", "-p", str(port)],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        try:
            deadline = time.monotonic() + 5
            out = None
            while time.monotonic() < deadline:
                res = subprocess.run(
                    ["ip", "netns", "exec", self.host(client).ns, "iperf3", "-c", s.address, "-p", str(port),
                     "-t", str(seconds), "-J"], capture_output=True, text=True, timeout=seconds + 20)
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
            return out["end"]["sum_received"]["bits_per_second"] / 1e6
        finally:
            stop_process(srv, timeout=3)
