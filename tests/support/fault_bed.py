"""Helpers for the fault tests: agents in a namespace test bed, sweeps run and timed, cells looked up.

Sweeps are requested as a CI job would (``manage.py sweep --wait --json``) while the
test watches the database for the moment the faulty cell closes, so each fault's
time from injection to its cell can be measured.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.support.artifacts import ARTIFACTS
from tests.support.sweep_setup import TimedSweep, sweep_flags, wait_online

FAST = sweep_flags(connect=3, store=5, init=8, bandwidth=3)


def agent_bed(bed, stack):
    """The bed with one agent per host started: what a fault test's module-scoped ``bed`` fixture returns."""
    start_agents(bed, stack)
    return bed


def start_agents(bed, stack, names=None, by_name: bool = False) -> None:
    """One agent per host, reaching the broker through Redis's unix socket."""
    for host in bed.hosts:
        if names is None or host.name in names:
            _start_agent(bed, stack, host.name, address=host.name if by_name else host.address)


def restart_agent(bed, stack, name: str, address: str | None = None, timeout: float = 60) -> None:
    """Stop and start the host's agent; return once the new agent has heartbeated."""
    restart_agents(bed, stack, {name: address}, timeout)


def restart_agents(bed, stack, addresses: dict[str, str | None], timeout: float = 60) -> None:
    """Stop and start several hosts' agents together (host name -> the address to advertise, None for its own);
    return once every new agent has heartbeated. Starting them side by side saves an agent start each."""
    from django.utils import timezone

    from cluster_health.models import Node

    for name in addresses:
        bed.stop_agent(name)
    restarted = timezone.now()
    for name, address in addresses.items():
        _start_agent(bed, stack, name, address=address or bed.host(name).address)
    deadline = time.monotonic() + timeout
    waiting = set(addresses)
    while waiting:
        waiting -= set(
            Node.objects.filter(name__in=waiting, last_heartbeat__gt=restarted).values_list("name", flat=True)
        )
        if waiting and time.monotonic() > deadline:
            logs = "\n".join(f"{name}:\n{bed.agent_log(name)[-3000:]}" for name in sorted(waiting))
            raise AssertionError(
                f"the restarted agents on {', '.join(sorted(waiting))} sent no heartbeat in {timeout}s:\n{logs}"
            )
        if waiting:
            time.sleep(0.2)


def _start_agent(bed, stack, name: str, address: str) -> None:
    bed.start_agent(name, stack.redis.socket_url, env=stack.env, address=address, key_file=stack.key_file(name))


@contextmanager
def fault(names, inject: Callable[[], object], clear: Callable[[], object]) -> Iterator[float]:
    """Once every node in ``names`` is online, the fault ``inject`` makes, cleared by ``clear`` when the block ends.

    Yields the moment of injection (``time.monotonic()``), which the fault's timings count from.
    """
    wait_online(names)
    injected = time.monotonic()
    inject()
    try:
        yield injected
    finally:
        clear()


def cell(report: dict, a: str, b: str) -> dict:
    for p in report["pairs"]:
        if {p["a"], p["b"]} == {a, b}:
            return p
    raise KeyError(f"no pair {a}-{b} in the sweep")


def others(report: dict, *links: tuple[str, str]) -> list[dict]:
    """Every pair that is none of ``links``."""
    skip = [set(link) for link in links]
    return [p for p in report["pairs"] if {p["a"], p["b"]} not in skip]


TIMINGS = "fault_timings.json"


def record(fault: str, seconds: float, shown: str, cell: dict | None = None) -> None:
    """One row of the fault-timing table: printed, and appended to fault_timings.json in the test artifacts.

    ``seconds``: from injecting the fault to its cell closing (or its finding, at the sweep's end);
    ``cell``: what the matrix showed for it (status, stage and reason; none where no cell did);
    ``shown``: the rest, in words.
    """
    shown_as = {key: (cell or {}).get(key) for key in ("status", "stage", "reason")}
    row = {
        "fault": fault,
        "seconds": round(seconds, 1),
        **shown_as,
        "shown": shown,
        "test": os.environ.get("PYTEST_CURRENT_TEST", "").split(" ")[0],
        "recorded": time.strftime("%Y-%m-%dT%H:%M:%S"),
    }
    print(f"\nFAULT {fault}: {seconds:.1f}s: {'/'.join(str(v) for v in shown_as.values())}: {shown}")
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    path = Path(ARTIFACTS) / TIMINGS
    try:
        rows = json.loads(path.read_text())
    except (OSError, ValueError):
        rows = []
    if not isinstance(rows, list):
        rows = []
    rows.append(row)
    tmp = path.with_suffix(f".tmp{os.getpid()}")
    tmp.write_text(json.dumps(rows, indent=1) + "\n")
    tmp.replace(path)  # a reader never sees half a file


def record_cell(fault: str, seconds: float, p: dict, shown: str = "", reason: str | None = None) -> None:
    """record() for a fault seen in one matrix cell: its status, stage and reason.

    ``reason``: the code of the finding that names the fault, where that says more than the cell's own reason.
    """
    shown = shown or f"{p['status']} at {p['stage']} ({p['reason']})"
    record(fault, seconds, shown, {**p, "reason": reason or p["reason"]})


def env_flag(name: str) -> bool:
    return bool(os.environ.get(name))


def fast_sweep(stack, nodes, injected_at=None, *, kind: str = "connectivity", timeout: int = 150) -> TimedSweep:
    """A fast sweep of ``nodes`` through the CLI, timed from ``injected_at`` (the fault)."""
    return TimedSweep(
        stack,
        "--kind",
        kind,
        "--nodes",
        ",".join(nodes),
        "--wait",
        "--timeout",
        str(timeout),
        *FAST,
        injected_at=injected_at,
    )


def namespace_bed_or_skip():
    from devtools import testbed

    reason = testbed.available()
    if reason:
        if os.environ.get("CI"):
            pytest.fail(f"CI must run the namespace test bed, but: {reason}")
        pytest.skip(f"namespace test bed unavailable: {reason}")
    return testbed


def close_beds(beds) -> None:
    """Tear the beds down and keep their agents' logs with the test artifacts."""
    for bed in beds:
        bed.close()
        for log in bed.workdir.glob("*.log"):
            dest = ARTIFACTS / "testbed-logs"
            dest.mkdir(parents=True, exist_ok=True)
            (dest / f"{bed.tag}-{log.name}").write_bytes(log.read_bytes()[-1_000_000:])


@contextmanager
def bed_builder(workdir_for):
    """A bed builder (hosts, **TestBed options) whose beds are all torn down when the block ends."""
    make, made = beds(workdir_for)
    try:
        yield make
    finally:
        close_beds(made)


def beds(workdir_for):
    """A bed builder (hosts, **TestBed options) and the list of beds it made, for close_beds."""
    testbed = namespace_bed_or_skip()
    testbed.cleanup_stale()
    made = []

    def make(hosts: int = 4, **kwargs):
        bed = testbed.TestBed(hosts, workdir=workdir_for(len(made)), **kwargs)
        made.append(bed)
        return bed.build()

    return make, made
