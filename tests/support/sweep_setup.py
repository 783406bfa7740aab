"""Sweeps set up for the tests: through the sweep driver, or as a CI job runs them (``manage.py`` on a stack).

``sweep_flags`` keeps a real sweep test-sized; ``TimedSweep`` runs one in the background and times its cells;
``wait_online`` and ``wait_offline`` watch the nodes' heartbeats.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from datetime import timedelta

import redis
from django.utils import timezone

from agents import contract, signing
from cluster_health import vocabulary
from cluster_health.models import Node, PairProbe, Sweep
from cluster_health.queues import keys
from devtools import services
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


def open_pairs(stack, driver, tag: str, count: int) -> tuple[int, list[dict]]:
    """A pairs sweep over 2*count fresh, enrolled nodes; its only round's commands, sorted."""
    names = [f"{tag}{i}" for i in range(2 * count)]
    for name in names:
        stack.keys.setdefault(name, signing.new_key(name))
        heartbeat(name)
    stack.restore_keys()
    sweep = driver.sweep(kind="pairs", nodes=names, pairs=[[names[2 * i], names[2 * i + 1]] for i in range(count)])
    # The simulated agents stay alive throughout: the stack's reaper must not call them silent.
    Node.objects.filter(name__in=names).update(last_heartbeat=timezone.now() + timedelta(hours=1))
    return sweep.pk, sorted(driver.take(), key=lambda c: (c["probe_id"], c["rank"]))


def where_messages_are() -> dict:
    """Where halves can wait between an agent and the database: for a failure message."""
    from django.conf import settings

    client = redis.Redis.from_url(settings.REDIS_URL)
    try:
        lists = [contract.INGEST_QUEUE, vocabulary.SERVER_QUEUE, "ae.undeliver"]
        lists += [keys.taken_key(name) for name in keys.registered(client)] + keys.buffer_keys()
        out: dict = {key: client.llen(key) for key in lists}
        out["bindings"] = sorted(
            m.decode(errors="replace") for m in client.smembers(f"_kombu.binding.{contract.INGEST_QUEUE}")
        )
        out["queue keys"] = sorted(k.decode(errors="replace") for k in client.scan_iter(f"{contract.INGEST_QUEUE}*"))
        return out
    finally:
        client.close()


def wait_closed(sweep_id: int, count: int, timeout: float) -> float:
    start = time.monotonic()
    try:
        services.wait_until(
            lambda: PairProbe.objects.filter(sweep_id=sweep_id, status="ok").count() == count,
            timeout,
            interval=0.02,
            message=f"{count} pairs ok",
        )
    except TimeoutError as exc:
        statuses = list(PairProbe.objects.filter(sweep_id=sweep_id).values_list("status", flat=True))
        counts = {s: statuses.count(s) for s in set(statuses)}
        raise AssertionError(f"{exc}: pairs {counts}; messages: {where_messages_are()}") from None
    return time.monotonic() - start


def running_agents(stack, names):
    for name in names:
        if name not in stack.agents:
            stack.start_agent(name)
    for name in list(stack.agents):
        if name not in names:
            stack.stop_agent(name)
    wait_online(names)


def enrolled_key(node: str) -> signing.NodeKey:
    """A new key for ``node``, enrolled in its place (its old keys deleted)."""
    from cluster_health.models import AgentKey

    key = signing.new_key(node)
    AgentKey.objects.filter(node_name=node).delete()
    AgentKey.sealed(key).save()
    return key


def signed(purpose: str, body: dict) -> dict:
    """The keyword arguments of an agent's message: ``body`` signed by a key enrolled for its node now."""
    return {purpose: body, "auth": signing.sign(body, enrolled_key(body["node"]), purpose)}


def queued_heartbeat(node: str) -> bytes:
    """A heartbeat of ``node``, signed by a key enrolled for it now, as Celery's Redis transport queues it."""
    import base64

    kwargs = signed("heartbeat", {"v": 1, "node": node, "address": "127.0.0.1", "facts": {}})
    return json.dumps(
        {
            "body": base64.b64encode(json.dumps([[], kwargs, {}]).encode()).decode(),
            "content-type": "application/json",
            "content-encoding": "utf-8",
            "headers": {"task": contract.TASK_HEARTBEAT, "id": f"hb-{node}"},
            "properties": {"body_encoding": "base64"},
        }
    ).encode()


def reserved_heartbeat(node: str) -> bytes:
    """``queued_heartbeat`` as the transport keeps a message a worker fetched and has not acked."""
    return json.dumps([json.loads(queued_heartbeat(node)), "server", vocabulary.SERVER_QUEUE]).encode()
