"""Real receivers and a real Slurm controller for the action tests.

- ``WebhookReceiver``: a tiny HTTP server thread on 127.0.0.1 that records JSON bodies
  (and can answer 500 a few times first, for the retry tests).
- ``SlurmCluster``: a private ``munged`` and ``slurmctld`` (Debian's packages) with a
  slurm.conf listing the test nodes, on private ports and directories; ``start_slurmd(node)``
  adds a ``slurmd`` for one of them on loopback, so that jobs run there.
- ``require_tool``: a tool the suite needs; skipped when absent, failed instead when
  scripts/test runs the suite (it installs them and lists them in CLUSTER_HEALTH_TEST_REQUIRE).
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import socket
import subprocess
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from devtools.services import stop_process, wait_for_port


def require_tool(name: str) -> str:
    """The path of a command-line tool, or skip (fail when scripts/test said it must be there)."""
    path = shutil.which(name) or next((p for p in (f"/usr/sbin/{name}", f"/sbin/{name}") if os.path.exists(p)), None)
    if path:
        return path
    required = {t.strip() for t in os.environ.get("CLUSTER_HEALTH_TEST_REQUIRE", "").split(",") if t.strip()}
    if name in required or "all" in required:
        pytest.fail(
            f"{name} is required in this run (CLUSTER_HEALTH_TEST_REQUIRE) but is not installed; "
            f"run scripts/setup with the flag that installs it"
        )
    pytest.skip(f"{name} is not installed (scripts/setup installs it; scripts/test requires it)")


class WebhookReceiver:
    """An HTTP endpoint on loopback that keeps every JSON body it is sent."""

    def __init__(self, fail_first: int = 0):
        self.bodies: list[dict] = []
        self.requests = 0
        self.fail_first = fail_first
        self.lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length)
                with receiver.lock:
                    receiver.requests += 1
                    failing = receiver.requests <= receiver.fail_first
                    if not failing:
                        receiver.bodies.append(json.loads(raw))
                self.send_response(500 if failing else 200)
                self.end_headers()
                self.wfile.write(b"try later" if failing else b"ok")

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook/{secrets.token_hex(8)}"
        self.thread = threading.Thread(target=self.server.serve_forever, name="webhook-receiver", daemon=True)

    def __enter__(self) -> WebhookReceiver:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(5)

    def wait_for(self, predicate, timeout: float) -> dict:
        """The first body for which predicate(body) holds, waiting at most timeout seconds."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self.lock:
                hit = next((b for b in self.bodies if predicate(b)), None)
            if hit is not None:
                return hit
            time.sleep(0.2)
        raise AssertionError(f"no matching webhook body within {timeout}s; got {self.bodies}")


def listen_port() -> int:
    """A free port below the kernel's ephemeral range, for a daemon that binds it later: a port from the
    ephemeral range (``free_port``) can be taken meanwhile by any outgoing connection (sinfo's, slurmctld's)."""
    low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    for _ in range(200):
        port = secrets.randbelow(low - 20000) + 20000
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free port found between 20000 and {low}")


class SlurmCluster:
    """A private slurmctld (and munged) for the listed nodes, in ``workdir``."""

    def __init__(self, workdir: Path, nodes: list[str], cpus: int = 1, own_ports: bool = False):
        self.workdir = Path(workdir)
        self.nodes = nodes
        self.cpus = cpus
        self.own_ports = own_ports  # a SlurmdPort per node: several slurmd on this one machine
        self.conf = self.workdir / "slurm.conf"
        self.socket = self.workdir / "munge" / "munge.socket"
        self.procs: dict[str, subprocess.Popen] = {}
        self.env = {**os.environ, "SLURM_CONF": str(self.conf)}

    def start(self) -> SlurmCluster:
        munged, slurmctld = require_tool("munged"), require_tool("slurmctld")
        require_tool("scontrol")
        require_tool("sinfo")
        munge_dir = self.socket.parent
        munge_dir.mkdir(parents=True)
        # munged refuses sockets in directories that others can write or cannot search.
        os.chmod(self.workdir, 0o711)
        os.chmod(munge_dir, 0o711)
        key = munge_dir / "munge.key"
        key.write_bytes(secrets.token_bytes(1024))
        os.chmod(key, 0o400)
        self.procs["munged"] = subprocess.Popen(
            [
                munged,
                "--foreground",
                "--force",
                f"--socket={self.socket}",
                f"--key-file={key}",
                f"--log-file={munge_dir / 'munged.log'}",
                f"--pid-file={munge_dir / 'munged.pid'}",
                f"--seed-file={munge_dir / 'munged.seed'}",
            ],
            stdout=subprocess.DEVNULL,
            stderr=open(munge_dir / "munged.out", "wb"),
            start_new_session=True,
        )
        deadline = time.monotonic() + 10
        while not self.socket.exists():
            if time.monotonic() > deadline or self.procs["munged"].poll() is not None:
                raise RuntimeError(f"munged did not start: {(munge_dir / 'munged.out').read_text()}")
            time.sleep(0.05)
        port = listen_port()
        state = self.workdir / "state"
        state.mkdir()
        self.conf.write_text(
            "\n".join(
                [
                    "ClusterName=chtest",
                    # slurmctld only runs where its short host name matches SlurmctldHost; the address is loopback.
                    f"SlurmctldHost={socket.gethostname().split('.')[0]}(127.0.0.1)",
                    f"SlurmctldPort={port}",
                    f"SlurmdPort={listen_port()}",
                    f"SlurmUser={os.environ.get('USER') or 'root'}" if os.geteuid() else "SlurmUser=root",
                    "AuthType=auth/munge",
                    "CredType=cred/munge",
                    f"AuthInfo=socket={self.socket}",
                    f"StateSaveLocation={state}",
                    # One pid file and spool a node: each slurmd started with -N kills the one its pid file names.
                    f"SlurmdSpoolDir={self.workdir / 'spool-%n'}",
                    f"SlurmdPidFile={self.workdir / 'slurmd-%n.pid'}",
                    f"SlurmctldPidFile={self.workdir / 'slurmctld.pid'}",
                    f"SlurmctldLogFile={self.workdir / 'slurmctld.log'}",
                    "ProctrackType=proctrack/linuxproc",
                    "TaskPlugin=task/none",
                    "SelectType=select/linear",
                    "SchedulerType=sched/builtin",
                    "MpiDefault=none",
                    "SlurmdTimeout=0",  # no slurmd runs here: never mark the test nodes down for silence
                    "ReturnToService=2",
                    *self._node_lines(),
                    "PartitionName=test Nodes=ALL Default=YES State=UP",
                    "",
                ]
            )
        )
        self.procs["slurmctld"] = subprocess.Popen(
            [slurmctld, "-D", "-i", "-f", str(self.conf)],
            env=self.env,
            stdout=subprocess.DEVNULL,
            stderr=open(self.workdir / "slurmctld.out", "wb"),
            start_new_session=True,
        )
        try:
            wait_for_port("127.0.0.1", port, 30, self.procs["slurmctld"])
            deadline = time.monotonic() + 30
            while self.sinfo_states() == {}:
                if time.monotonic() > deadline:
                    raise RuntimeError("sinfo lists no nodes")
                time.sleep(0.2)
        except Exception as exc:
            self.stop()
            out = (self.workdir / "slurmctld.out").read_text()[-2000:]
            raise RuntimeError(f"slurmctld did not start: {out}") from exc
        return self

    def _node_lines(self) -> list[str]:
        same = f"NodeAddr=127.0.0.1 NodeHostname=localhost CPUs={self.cpus} State=UNKNOWN"
        if not self.own_ports:
            return [f"NodeName={','.join(self.nodes)} {same}"]
        return [f"NodeName={node} Port={listen_port()} {same}" for node in self.nodes]

    def start_slurmd(self, node: str, timeout: float = 30) -> None:
        """A slurmd for ``node`` on this machine (loopback, the private ports), until slurmctld says idle."""
        slurmd = require_tool("slurmd")
        (self.workdir / f"spool-{node}").mkdir(exist_ok=True)
        self.procs[f"slurmd-{node}"] = subprocess.Popen(
            [slurmd, "-D", "-N", node, "-f", str(self.conf)],
            env=self.env,
            stdout=subprocess.DEVNULL,
            stderr=open(self.workdir / f"slurmd-{node}.out", "wb"),
            start_new_session=True,
        )
        deadline = time.monotonic() + timeout
        while self.sinfo_states().get(node, ("",))[0] != "idle":
            if time.monotonic() > deadline or self.procs[f"slurmd-{node}"].poll() is not None:
                raise RuntimeError(f"slurmd {node}: {(self.workdir / f'slurmd-{node}.out').read_text()[-2000:]}")
            time.sleep(0.2)

    def run(self, *argv: str) -> str:
        out = subprocess.run(list(argv), env=self.env, capture_output=True, text=True, timeout=20)
        if out.returncode != 0:
            raise RuntimeError(f"{argv[0]}: {out.stderr.strip()}")
        return out.stdout

    def sinfo_lines(self) -> list[str]:
        """``sinfo -N`` lines: node, state, reason."""
        return self.run("sinfo", "--Node", "--noheader", "--format=%N|%T|%E").strip().splitlines()

    def sinfo_states(self) -> dict[str, tuple[str, str]]:
        try:
            lines = self.sinfo_lines()
        except RuntimeError:
            return {}
        out = {}
        for line in lines:
            name, state, reason = line.split("|", 2)
            out[name] = (state, reason)
        return out

    def show_node(self, name: str) -> str:
        return self.run("scontrol", "show", "node", "--oneliner", name).strip()

    def stop(self) -> None:
        for name in [n for n in self.procs if n.startswith("slurmd-")] + ["slurmctld", "munged"]:
            proc = self.procs.pop(name, None)
            if proc is not None:
                stop_process(proc, timeout=10)
