"""Helpers for the fault tests: agents in a namespace test bed, sweeps run and timed, cells looked up.

Sweeps are requested as a CI job would (``manage.py sweep --wait --json``) while the
test watches the database for the moment the faulty cell closes, so each fault's
time from injection to its cell can be measured.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from tests.conftest import ARTIFACTS

FAST = [
    "--sizes",
    "4096,65536",
    "--iterations",
    "3",
    "--stage-timeout",
    "connect=3",
    "--stage-timeout",
    "store=5",
    "--stage-timeout",
    "init=8",
    "--stage-timeout",
    "bandwidth=3",
]
OPEN = ("pending", "running")


def start_agents(bed, stack, names=None, by_name: bool = False) -> None:
    """One agent per host, reaching the broker through Redis's unix socket."""
    for host in bed.hosts:
        if names is None or host.name in names:
            bed.start_agent(
                host.name,
                stack.redis.socket_url,
                env=stack.env,
                address=host.name if by_name else host.address,
                key_file=stack.key_file(host.name),
            )


def restart_agent(bed, stack, name: str, address: str | None = None, timeout: float = 60) -> None:
    """Stop and start the host's agent; return once the new agent has heartbeated."""
    from django.utils import timezone

    from cluster_health.models import Node

    bed.stop_agent(name)
    restarted = timezone.now()
    bed.start_agent(
        name,
        stack.redis.socket_url,
        env=stack.env,
        address=address or bed.host(name).address,
        key_file=stack.key_file(name),
    )
    deadline = time.monotonic() + timeout
    while not Node.objects.filter(name=name, last_heartbeat__gt=restarted).exists():
        if time.monotonic() > deadline:
            raise AssertionError(
                f"the restarted agent on {name} sent no heartbeat in {timeout}s:\n" + bed.agent_log(name)[-3000:]
            )
        time.sleep(0.2)


def wait_online(names, timeout: float = 60, address: dict | None = None) -> None:
    """Until every node heartbeats (with the given address, where one is given)."""
    from cluster_health.models import Node

    deadline = time.monotonic() + timeout
    while True:
        nodes = {n.name: n for n in Node.objects.filter(name__in=names)}
        ready = {
            name
            for name, n in nodes.items()
            if n.is_online() and (not address or name not in address or n.address == address[name])
        }
        if ready == set(names):
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"not online after {timeout}s: {set(names) - ready}")
        time.sleep(0.3)


def wait_offline(name: str, timeout: float = 30) -> None:
    from cluster_health.models import Node

    deadline = time.monotonic() + timeout
    while Node.objects.filter(name=name).first() and Node.objects.get(name=name).is_online():
        if time.monotonic() > deadline:
            raise AssertionError(f"{name} still online after {timeout}s")
        time.sleep(0.3)


def manage(stack, *args, timeout: float = 240) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "manage.py", *args], env=stack.env, capture_output=True, text=True, timeout=timeout
    )


def cell(report: dict, a: str, b: str) -> dict:
    for p in report["pairs"]:
        if {p["a"], p["b"]} == {a, b}:
            return p
    raise KeyError(f"no pair {a}-{b} in the sweep")


def others(report: dict, *links: tuple[str, str]) -> list[dict]:
    """Every pair that is none of ``links``."""
    skip = [set(link) for link in links]
    return [p for p in report["pairs"] if {p["a"], p["b"]} not in skip]


class TimedSweep:
    """`manage.py sweep --wait --json` in the background; times when watched cells close."""

    def __init__(self, stack, *args, injected_at: float | None = None, command: str = "sweep"):
        self.started = time.monotonic()
        self.injected_at = injected_at or self.started
        self.before = _last_sweep_id()
        self.proc = subprocess.Popen(
            [sys.executable, "manage.py", command, *args, "--json"],
            env=stack.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    def sweep_id(self, timeout: float = 30) -> int:
        deadline = time.monotonic() + timeout
        while (last := _last_sweep_id()) == self.before:
            if time.monotonic() > deadline or self.proc.poll() is not None:
                raise AssertionError("the sweep was never created: " + self.proc.stderr.read()[-2000:])
            time.sleep(0.1)
        return last

    def time_to_cells(self, *links: tuple[str, str], timeout: float = 120) -> dict[tuple[str, str], float]:
        """Seconds from injection until each a-b cell is final (polled together)."""
        from cluster_health.models import PairProbe

        sid = self.sweep_id()
        deadline = time.monotonic() + timeout
        found: dict[tuple[str, str], float] = {}
        while len(found) < len(links):
            closed = {
                frozenset(p)
                for p in PairProbe.objects.filter(sweep_id=sid)
                .exclude(status__in=OPEN)
                .values_list("node_a__name", "node_b__name")
            }
            for link in links:
                if link not in found and frozenset(link) in closed:
                    found[link] = time.monotonic() - self.injected_at
            if len(found) < len(links):
                if time.monotonic() > deadline or self.proc.poll() is not None:
                    raise AssertionError(f"cells still open: {set(links) - set(found)}")
                time.sleep(0.1)
        return found

    def report(self, timeout: float = 240) -> tuple[int, dict]:
        out, err = self.proc.communicate(timeout=timeout)
        try:
            return self.proc.returncode, json.loads(out)
        except ValueError:
            raise AssertionError(f"exit {self.proc.returncode}: {out[-2000:]} {err[-4000:]}") from None

    def elapsed(self) -> float:
        return time.monotonic() - self.injected_at


def _last_sweep_id() -> int:
    from cluster_health.models import Sweep

    last = Sweep.objects.order_by("-id").values_list("id", flat=True).first()
    return last or 0


TIMINGS = "fault_timings.json"


def record(
    fault: str,
    seconds: float,
    shown: str,
    *,
    status: str | None = None,
    stage: str | None = None,
    reason: str | None = None,
) -> None:
    """One row of the fault-timing table: printed, and appended to fault_timings.json in the test artifacts.

    ``seconds``: from injecting the fault to its cell closing (or its finding, at the sweep's end);
    ``status``/``stage``/``reason``: what the matrix showed for it; ``shown``: the rest, in words.
    """
    row = {
        "fault": fault,
        "seconds": round(seconds, 1),
        "status": status,
        "stage": stage,
        "reason": reason,
        "shown": shown,
        "test": os.environ.get("PYTEST_CURRENT_TEST", "").split(" ")[0],
        "recorded": time.strftime("%Y-%m-%dT%H:%M:%S"),
    }
    print(f"\nFAULT {fault}: {seconds:.1f}s: {status}/{stage}/{reason}: {shown}")
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


def record_cell(fault: str, seconds: float, p: dict, shown: str = "") -> None:
    """record() for a fault seen in one matrix cell: its status, stage and reason."""
    record(
        fault,
        seconds,
        shown or f"{p['status']} at {p['stage']} ({p['reason']})",
        status=p["status"],
        stage=p["stage"],
        reason=p["reason"],
    )


def env_flag(name: str) -> bool:
    return bool(os.environ.get(name))


def connectivity(stack, nodes, injected_at=None):
    """A fast connectivity sweep of ``nodes`` through the CLI, timed from ``injected_at`` (the fault)."""
    return TimedSweep(
        stack,
        "--kind",
        "connectivity",
        "--nodes",
        ",".join(nodes),
        "--wait",
        "--timeout",
        "150",
        *FAST,
        injected_at=injected_at,
    )
