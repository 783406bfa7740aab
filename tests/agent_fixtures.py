"""Helpers for the probe and agent tests: commands with test-sized parameters, pairs run side by side."""

from __future__ import annotations

import os
import secrets
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from agents.runner import TMP_PREFIX, run_probe
from devtools.probe_commands import loopback_pair
from devtools.services import resident_kib  # noqa: F401  (re-exported for test modules)

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
    return loopback_pair(rank, rendezvous or "t" + secrets.token_hex(8), **fields)


def run_ranks(commands: list[dict], broker_url: str, on_event=None) -> list[dict]:
    """Run every rank's half at once through the Redis rendezvous; results in rank order."""
    results: dict[int, dict] = {}
    errors: list[BaseException] = []

    def one(cmd):
        try:
            results[cmd["rank"]] = run_probe(
                cmd, broker_url, on_event=(lambda e: on_event(cmd["rank"], e)) if on_event else None
            )
        except BaseException as e:  # surfaced below, in the test's thread
            errors.append(e)

    threads = [threading.Thread(target=one, args=(c,)) for c in commands]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return [results[c["rank"]] for c in commands]


def pair(broker_url: str, on_event=None, **overrides) -> tuple[dict, dict]:
    rdv = "t" + secrets.token_hex(8)
    r0, r1 = run_ranks([command(0, rdv, **overrides), command(1, rdv, **overrides)], broker_url, on_event)
    return r0, r1


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
