"""The namespace test bed for the benchmarks: bounded in time, torn down on every way out.

``namespace_bed(hosts)`` is a bare ``devtools.testbed.TestBed`` (no server, no
agents) for measurements between hosts; ``system_bed(hosts)`` adds what a deployment
runs: a scratch database (``benchmarks/scratch.py``), a private redis-server that the
agents reach through its unix socket (so faults on the test network hit probes, not
the control path), the Celery server worker and beat, and one agent per host, all
with the product's default settings unless ``agent_env`` says otherwise.

Both give the block a wall-clock limit (SIGALRM raises ``BenchmarkTimeout``) and
turn SIGTERM into KeyboardInterrupt, so Ctrl-C, a kill and a hang all unwind through
the teardown; the teardown itself runs with those signals held off. Must run as root
under ``flock /tmp/netns.lock`` (the test sessions remove every ``chtb-*`` namespace
they find at start). Nothing here imports Django before the scratch database is set.
"""

from __future__ import annotations

import os
import shutil
import signal
import statistics
import sys
import tempfile
import time
from contextlib import ExitStack, contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from devtools import (  # noqa: E402  (after the sys.path entry above)
    devstack,
    testbed,
)

OPEN = ("pending", "running")


class BenchmarkTimeout(TimeoutError):
    """The benchmark ran past its wall-clock limit."""


def _raise_interrupt(signum, frame):
    raise KeyboardInterrupt(f"signal {signum}")


def _raise_timeout(signum, frame):
    raise BenchmarkTimeout("the benchmark ran past its time limit; tearing the bed down")


@contextmanager
def bounded(limit_s: float):
    """Run the block with SIGTERM as Ctrl-C and a wall-clock limit; restores the old handlers after."""
    old = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGALRM)}
    signal.signal(signal.SIGTERM, _raise_interrupt)
    signal.signal(signal.SIGALRM, _raise_timeout)
    signal.setitimer(signal.ITIMER_REAL, limit_s)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        for sig, handler in old.items():
            signal.signal(sig, handler)


@contextmanager
def shielded():
    """Hold off Ctrl-C, SIGTERM and the time limit while tearing down, so the teardown finishes."""
    signal.setitimer(signal.ITIMER_REAL, 0)
    old = {sig: signal.signal(sig, signal.SIG_IGN) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)


def require_bed() -> None:
    reason = testbed.available()
    if reason:
        raise testbed.TestBedUnavailable(reason)


@contextmanager
def namespace_bed(hosts: int, limit_s: float, **options):
    """A built TestBed of ``hosts`` hosts for the block, closed on every way out."""
    require_bed()
    work = Path(tempfile.mkdtemp(prefix="ch-bench-bed-"))
    bed = testbed.TestBed(hosts, workdir=work, **options)
    with bounded(limit_s):
        try:
            bed.build()
            yield bed
        finally:
            with shielded():
                bed.close()
                shutil.rmtree(work, ignore_errors=True)


class SystemBed:
    """The bed with the server side running; sweeps are requested and read in this process."""

    def __init__(self, bed: testbed.TestBed, supervisor: devstack.Supervisor, broker_url: str):
        self.bed = bed
        self.supervisor = supervisor
        self.broker_url = broker_url

    def wait_online(self, names: list[str], timeout: float = 60.0) -> None:
        from cluster_health.models import Node

        deadline = time.monotonic() + timeout
        while True:
            online = {n.name for n in Node.objects.filter(name__in=names) if n.is_online()}
            if online == set(names):
                return
            if time.monotonic() > deadline:
                logs = "\n".join(f"--- {n}\n{self.bed.agent_log(n)[-1500:]}" for n in set(names) - online)
                raise RuntimeError(f"agents not online after {timeout:.0f}s: {set(names) - online}\n{logs}")
            time.sleep(0.2)

    def request(self, **request):
        """A sweep requested as the dashboard or `manage.py sweep` does; the server worker starts it."""
        from cluster_health import sweeps

        return sweeps.request_sweep(source="command", **request)

    def wait_closed(self, sweep, timeout: float = 300.0):
        """The sweep row once it is no longer open (the beat's reaper guards against silence)."""
        deadline = time.monotonic() + timeout
        while True:
            sweep.refresh_from_db()
            if not sweep.is_open:
                return sweep
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"sweep {sweep.pk} still {sweep.status} after {timeout:.0f}s "
                    f"(round {sweep.current_round} of {sweep.total_rounds})\n" + self.supervisor.log("worker")[-3000:]
                )
            time.sleep(0.1)

    def sweep(self, timeout: float = 300.0, **request):
        return self.wait_closed(self.request(**request), timeout)


@contextmanager
def system_bed(
    hosts: int,
    limit_s: float,
    database: str | None = None,
    agent_env: dict | None = None,
    bed_options: dict | None = None,
):
    """Scratch database, private Redis, server worker, beat, a bed and one agent per host, all online.

    ``database``: a postgres:// server URL for the scratch database (default: the
    ``BENCH_DATABASE_URL`` environment variable, else a scratch SQLite file). ``bed_options``:
    more ``TestBed`` arguments (a two-tier bed's ``racks`` and ``uplink_mbit``).
    """
    require_bed()
    from benchmarks.scratch import scratch_database

    database = database or os.environ.get("BENCH_DATABASE_URL") or None
    work = Path(tempfile.mkdtemp(prefix="ch-bench-sys-"))
    redis_port = devstack.free_port()
    redis_url = f"redis://127.0.0.1:{redis_port}/0"
    socket_url = f"redis+socket://{work / 'redis.sock'}"
    # Read by Django's settings when the scratch database sets Django up, and by every child.
    os.environ.update(REDIS_URL=redis_url, CLUSTER_HEALTH_BROKER_URL=redis_url)
    for var in ("CLUSTER_HEALTH_HEARTBEAT_S", "CLUSTER_HEALTH_ONLINE_AFTER_S", "CLUSTER_HEALTH_REAPER_INTERVAL_S"):
        os.environ.pop(var, None)  # the product's defaults, not a test session's fast ones
    with bounded(limit_s), ExitStack() as stack:
        try:
            stack.callback(shutil.rmtree, work, ignore_errors=True)
            sup = devstack.Supervisor(work / "logs", devstack.python_env())
            stack.callback(sup.stop_all)
            proc = sup.start("redis", devstack.redis_args(redis_port, work, work / "redis.sock"))
            devstack.wait_for_port("127.0.0.1", redis_port, 10, proc)
            stack.enter_context(scratch_database(database))
            stack.callback(sup.stop_all)  # the server side stops before its database is dropped
            sup.env = devstack.python_env()  # now with the scratch DATABASE_URL
            sup.start("worker", devstack.server_worker_args("server@bench"), restart=True)
            sup.start("beat", devstack.beat_args(work), restart=True)
            bed = testbed.TestBed(hosts, workdir=work / "bed", **(bed_options or {}))
            stack.callback(bed.close)
            bed.build()
            env = devstack.python_env(**(agent_env or {}))
            from agents import signing
            from cluster_health.models import AgentKey

            for host in bed.hosts:  # enrolled as deployed: every message signed
                bed.key_file(host.name).parent.mkdir(mode=0o700, exist_ok=True)
                signing.write_key_file(bed.key_file(host.name), AgentKey.enroll(host.name, rotate=True)[1])
                bed.start_agent(host.name, socket_url, env=env, address=host.address)
            system = SystemBed(bed, sup, socket_url)
            system.wait_online([h.name for h in bed.hosts])
            yield system
        finally:
            with shielded():
                stack.close()


def pair_rows(sweep) -> list:
    from cluster_health.models import PairProbe

    return list(PairProbe.objects.filter(sweep=sweep).select_related("node_a", "node_b").order_by("round", "id"))


def halves(row) -> list[dict]:
    return [h for h in (row.half_a, row.half_b) if h]


def median(values) -> float | None:
    values = [v for v in values if v is not None]
    return round(statistics.median(values), 4) if values else None


def link_tx_bytes(bed: testbed.TestBed, name: str, dev: str = "eth0") -> int:
    """Bytes the host has sent on ``dev`` (its sysfs counter, read inside its namespace)."""
    out = testbed.sh("ip", "netns", "exec", bed.host(name).ns, "cat", f"/sys/class/net/{dev}/statistics/tx_bytes")
    return int(out.strip())


def main_for(run, doc: str, options: dict[str, dict]) -> int:
    """A benchmark module's command line: ``options`` maps each flag to argparse's keywords; the
    parsed values go to ``run`` by name, and its figures are printed as JSON with the time taken."""
    import argparse
    import json

    parser = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    for flag, spec in options.items():
        parser.add_argument(flag, **spec)
    started = time.monotonic()
    figures = run(**vars(parser.parse_args()))
    figures["took_s"] = round(time.monotonic() - started, 1)
    print(json.dumps(figures, indent=2))
    return 0
