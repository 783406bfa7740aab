"""Helpers for the probe and agent tests: commands with test-sized parameters, pairs run side by side."""

from __future__ import annotations

import os
import secrets
import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from kombu import Connection

from agents import broker, contract
from agents.probe import Probe, StageLog
from agents.runner import TMP_PREFIX
from cluster_health import vocabulary
from devtools.probe_commands import loopback_pair, run_ranks
from devtools.services import RedisServer, resident_kib  # noqa: F401  (resident_kib: re-exported for test modules)

SMALL_SIZES = [1024, 4096, 16384, 65536, 262144]
SHORT_TIMEOUTS = {"resolve": 2.0, "connect": 2.0, "store": 6.0, "init": 6.0, "collective": 4.0, "bandwidth": 4.0}
# What makes a probe command test-sized: few small sizes, few iterations, short stage timeouts and deadline.
TEST_SIZED = {
    "probe_id": 7,
    "sweep_id": 3,
    "sizes": SMALL_SIZES,
    "iterations": 3,
    "warmup": 1,
    "latency_iterations": 10,
    "deadline_s": 30.0,
}


@contextmanager
def held_port() -> Iterator[int]:
    """A loopback port that a listening socket of this process holds until the block ends."""
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        yield holder.getsockname()[1]


def command(rank: int, rendezvous: str | None = None, **overrides) -> dict:
    """One half of a loopback pair probe: node n<rank>, small sizes, short timeouts."""
    fields = {**TEST_SIZED, "timeouts": dict(SHORT_TIMEOUTS), **overrides}  # timeouts copied: a test may change them
    names = tuple(p["name"] for p in fields.get("peers") or []) or ("n0", "n1")  # a group names its own peers
    return loopback_pair(rank, rendezvous or "t" + secrets.token_hex(8), names, **fields)


def pair(broker_url: str, on_event=None, **overrides) -> tuple[dict, dict]:
    rdv = "t" + secrets.token_hex(8)
    r0, r1 = run_ranks([command(0, rdv, **overrides), command(1, rdv, **overrides)], broker_url, on_event)
    return r0, r1


def probe_in(tmp_path: Path, rank: int = 0, **overrides) -> Probe:
    """A probe for rank ``rank``'s half of ``command(rank, **overrides)``, its files in ``tmp_path``; not started."""
    spec = {
        "command": contract.validate_command(command(rank, **overrides)),
        "rendezvous": {"kind": "manual"},
        "events_path": str(tmp_path / "stages.jsonl"),
        "result_path": str(tmp_path / "result.json"),
        "spawned_at": time.time(),
    }
    return Probe(spec, StageLog(spec["events_path"]))


def probe_processes(agent_pid: int) -> list[tuple[int, Path]]:
    """(pid, working directory) of the probe processes below an agent, cold or forked from its warm host.

    A probe process runs in its own working directory (cluster-health-probe-*), whichever way it started.
    """
    parents: dict[int, int] = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/stat") as f:
                parents[int(pid)] = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
    below, frontier = set(), {agent_pid}
    while frontier:
        frontier = {pid for pid, ppid in parents.items() if ppid in frontier} - below
        below |= frontier
    found = []
    for pid in sorted(below):
        try:
            cwd = Path(os.readlink(f"/proc/{pid}/cwd"))
        except OSError:
            continue
        if cwd.name.startswith(TMP_PREFIX):
            found.append((pid, cwd))
    return found


# Where agents send: halves and heartbeats on their node's own ingest list (server.ingest.NAME); agents of
# the previous version on the shared server.ingest, older ones on the server queue.
AGENT_TO_SERVER = (vocabulary.SERVER_QUEUE, contract.INGEST_QUEUE, contract.INGEST_QUEUE_PREFIX + "*")
POLL_S = 0.05  # between looks at empty queues


class AgentMessages:
    """Reads what agents sent to the server (every queue above), acking each message it returns."""

    def __init__(self, conn: Connection):
        self.conn = conn
        self.queues = [(name, conn.SimpleQueue(name)) for name in AGENT_TO_SERVER[:2]]

    def _new_node_lists(self) -> None:
        known = {name for name, _ in self.queues}
        for key in self.conn.default_channel.client.scan_iter(match=AGENT_TO_SERVER[2], count=1000):
            name = key.decode() if isinstance(key, bytes) else key
            if name not in known:
                self.queues.append((name, self.conn.SimpleQueue(name)))

    def next(self, timeout: float):
        """(task, args, kwargs, queue name) of the next message on any queue, or None after ``timeout`` seconds."""
        end = time.monotonic() + timeout
        while True:
            self._new_node_lists()
            for name, queue in self.queues:
                try:
                    message = queue.get(block=False)
                except queue.Empty:
                    continue
                message.ack()
                args, kwargs, _ = message.decode()
                return message.headers["task"], args, kwargs, name
            if time.monotonic() >= end:
                return None
            time.sleep(POLL_S)

    def close(self) -> None:
        for _, queue in self.queues:
            queue.close()


def drain_until(url: str, predicate, timeout: float, environ: dict | None = None) -> dict:
    """The first message agents sent the server for which ``predicate(task, body)`` holds.

    ``environ``: where the TLS files of a ``rediss://`` URL are named (agents.broker).
    """
    end = time.monotonic() + timeout
    with Connection(url, ssl=broker.celery_ssl(url, environ)) as conn:
        messages = AgentMessages(conn)
        try:
            while time.monotonic() < end:
                got = messages.next(timeout=1.0)
                if got is not None and predicate(got[0], got[2]):
                    return got[2]
        finally:
            messages.close()
    raise AssertionError(f"no matching message on {AGENT_TO_SERVER} within {timeout}s")


@contextmanager
def acl_broker(workdir: Path, server_password: str, *rules: str) -> Iterator[RedisServer]:
    """A private Redis with named users only: ``server`` (everything, ``server_password``) and these ACL
    rules (``agent-NAME on >PASSWORD ...``); the default user is off."""
    server = RedisServer(workdir, users=("default off", f"server on >{server_password} ~* &* +@all", *rules))
    server.start()
    try:
        yield server
    finally:
        server.stop()
