"""Sweeps set up for the tests: through the sweep driver, or as a CI job runs them (``manage.py`` on a stack).

``sweep_flags`` keeps a real sweep test-sized; ``TimedSweep`` runs one in the background and times its cells;
``wait_online`` and ``wait_offline`` watch the nodes' heartbeats.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time

from cluster_health.models import Node, PairProbe, Sweep
from devtools.sweep_driver import heartbeat


def connectivity_sweep(driver, nodes=("n0", "n1", "n2", "n3")):
    """Heartbeats from ``nodes``, then a connectivity sweep of them: the sweep and its first round's commands."""
    for n in nodes:
        heartbeat(n)
    sweep = driver.sweep(kind="connectivity")
    return sweep, sorted(driver.take(), key=lambda c: (c["probe_id"], c["rank"]))


def sweep_flags(sizes: str = "4096,65536", iterations: int = 3, **stage_timeouts: float) -> list[str]:
    """``manage.py sweep`` options for a test-sized sweep: small sizes, few iterations, short stage timeouts."""
    flags = ["--sizes", sizes, "--iterations", str(iterations)]
    for stage, seconds in stage_timeouts.items():
        flags += ["--stage-timeout", f"{stage}={seconds}"]
    return flags


# Small sizes and short stage timeouts keep a loopback sweep fast on two cores.
FAST = sweep_flags(connect=3, init=10, bandwidth=3)


def manage(stack, *args: str, timeout: float = 240) -> subprocess.CompletedProcess:
    """``manage.py <args>`` run to its end against the stack's database and broker."""
    return subprocess.run(
        [sys.executable, "manage.py", *args], env=stack.env, capture_output=True, text=True, timeout=timeout
    )


def wait_online(names, timeout: float = 60, address: dict | None = None) -> None:
    """Until every node heartbeats (with the given address, where one is given)."""
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
    """Until the node's heartbeats are too old for it to count as online."""
    deadline = time.monotonic() + timeout
    while Node.objects.filter(name=name).first() and Node.objects.get(name=name).is_online():
        if time.monotonic() > deadline:
            raise AssertionError(f"{name} still online after {timeout}s")
        time.sleep(0.3)


OPEN = ("pending", "running")


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
    last = Sweep.objects.order_by("-id").values_list("id", flat=True).first()
    return last or 0
