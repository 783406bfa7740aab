"""The real agent end to end: `python -m agents run` workers on a private Redis, commands in, results out.

Commands go to each agent's queue as the server writes them (``dispatch.task_message``,
the text Celery's ``send_task`` writes); results and heartbeats are read off the `server` queue with kombu.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest
from celery import Celery
from kombu import Connection

from agents import contract, signing
from cluster_health.queues import dispatch
from devtools.services import agent_args, python_env, spawn, stop_process
from tests.support.agent_fixtures import AgentMessages, command, probe_processes, resident_kib

NODES = ("a0", "a1")
KEYS = {name: signing.new_key(name) for name in (*NODES, "a9")}  # enrolled as the server would
IDLE_RSS_LIMIT_KIB = 80 * 1024


@pytest.fixture(scope="module")
def broker(redis_url):
    # A database of its own, so no other test's server worker consumes these messages.
    url = redis_url.rsplit("/", 1)[0] + "/9"
    with Connection(url) as conn:
        conn.default_channel.client.flushdb()
    return url


def key_file(directory: Path, name: str) -> str:
    path = directory / f"{name}.key"
    signing.write_key_file(path, KEYS[name])
    return str(path)


@pytest.fixture(scope="module")
def agents_running(broker, tmp_path_factory):
    logs = tmp_path_factory.mktemp("agents")
    procs = {}
    try:
        for name in NODES:
            procs[name] = spawn(
                agent_args(name, "127.0.0.1", broker, key_file(logs, name)),
                logs / f"{name}.log",
                env=python_env(CLUSTER_HEALTH_HEARTBEAT_S="1"),
            )
        yield procs
    finally:
        for proc in procs.values():
            stop_process(proc)


@pytest.fixture(scope="module")
def sender(broker):
    app = Celery("test-server", broker=broker)
    app.conf.update(task_serializer="json", accept_content=["json"])
    return app


class ServerQueue:
    """Reads what the agents sent to the server's queues, keeping what the current test does not ask for."""

    def __init__(self, url: str):
        self.conn = Connection(url)
        self.messages = AgentMessages(self.conn)
        self.seen: list[tuple[str, dict]] = []

    def wait_for(self, predicate, count: int, timeout: float) -> list[dict]:
        end = time.monotonic() + timeout
        while True:
            matched = [body for task, body in self.seen if predicate(task, body)]
            if len(matched) >= count:
                return matched
            left = end - time.monotonic()
            assert left > 0, f"only {len(matched)} of {count} expected messages after {timeout}s"
            got = self.messages.next(timeout=min(left, 1.0))
            if got is None:
                continue
            task, _args, kwargs, queue = got
            body = kwargs.get("result") if task == contract.TASK_RESULT else kwargs.get("heartbeat")
            # Halves and heartbeats go to the node's own ingest list, which the ingest consumers drain.
            assert queue == contract.ingest_queue(body["node"]), (task, queue)
            # Every message an enrolled agent sends is signed by its own key.
            signing.verify(
                body,
                kwargs.get("auth"),
                "result" if task == contract.TASK_RESULT else "heartbeat",
                KEYS[body["node"]].secret_for,
            )
            self.seen.append((task, kwargs))

    def results(self, probe_id: int, count: int = 2, timeout: float = 60.0) -> list[dict]:
        found = self.wait_for(
            lambda task, body: task == contract.TASK_RESULT and body["result"]["probe_id"] == probe_id, count, timeout
        )
        return sorted((contract.validate_result(b["result"]) for b in found), key=lambda r: r["rank"])

    def close(self):
        self.messages.close()
        self.conn.release()


@pytest.fixture(scope="module")
def server_queue(broker):
    queue = ServerQueue(broker)
    yield queue
    queue.close()


def process_state(pid: int) -> str | None:
    """The state letter from /proc (Z: exited, not yet reaped by whoever adopted it), or None if gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return None


def send(sender, cmd, node: str | None = None, key: signing.NodeKey | None = None, **kwargs) -> None:
    """Send a command signed as the server signs it (with the target node's key unless another is given)."""
    if "auth" not in kwargs:
        kwargs["auth"] = signing.sign(cmd, key or KEYS[node or cmd["node"]], "command")
    queue = contract.agent_queue(node or cmd["node"])
    raw = dispatch.task_message(contract.TASK_PROBE, queue, {"command": cmd, **kwargs}, dispatch.START_GRACE_S)
    with sender.connection_for_write() as conn:
        conn.default_channel.client.lpush(queue, raw)


def send_pair(sender, probe_id: int, **overrides) -> None:
    rdv = f"e2e-{probe_id:06d}-{os.getpid()}"
    for rank, node in enumerate(NODES):
        peers = [{"name": n, "address": "127.0.0.1"} for n in NODES]
        send(sender, command(rank, rdv, node=node, probe_id=probe_id, peers=peers, **overrides))


@pytest.mark.timeout(60)
def test_it_sends_heartbeats_with_facts_and_stays_small(agents_running, server_queue):
    beats = server_queue.wait_for(lambda task, body: task == contract.TASK_HEARTBEAT, 4, 40)
    by_node = {}
    for body in beats:
        beat = contract.validate_heartbeat(body["heartbeat"])
        by_node[beat["node"]] = beat
    assert set(by_node) == set(NODES)
    for beat in by_node.values():
        assert beat["address"] == "127.0.0.1"
        assert beat["facts"]["versions"]["torch"]
        assert any(i["name"] == "lo" for i in beat["facts"]["interfaces"])
        assert "resolves_to" in beat["facts"]["host"]
    for name, proc in agents_running.items():
        rss = resident_kib(proc.pid)
        print(f"idle agent {name}: {rss / 1024:.1f} MiB resident")
        assert rss < IDLE_RSS_LIMIT_KIB
        assert not any("torch" in Path(m).name for m in open(f"/proc/{proc.pid}/maps").read().split())


@pytest.mark.timeout(90)
def test_it_runs_a_pair_and_reports_both_halves(agents_running, sender, server_queue):
    send_pair(sender, 101)
    halves = server_queue.results(101)
    assert [r["node"] for r in halves] == list(NODES)
    for result in halves:
        assert result["status"] == "ok", result["hint"]
        assert result["stage"] == "bandwidth" and result["busbw_gbps"] > 0
        assert result["sweep_id"] == 3


@pytest.mark.timeout(90)
def test_it_refuses_a_malformed_command_and_keeps_serving(agents_running, sender, server_queue):
    send(sender, "not a command", node="a0")
    send(sender, {**command(0, node="a0", probe_id=102), "sizes": [10**12]})
    refused = server_queue.results(102, count=1)[0]
    assert (refused["status"], refused["reason"]) == ("failed", "probe_crashed")
    assert "sizes" in refused["detail"] and "refused" in refused["hint"]

    # An expired command is dropped without a result; the one after it runs.
    for rank, node in enumerate(NODES):
        send(sender, command(rank, "expired-rdv-1", node=node, probe_id=103, expires_at=time.time() - 5))
    send_pair(sender, 104, last_stage="collective")
    assert all(r["status"] == "ok" for r in server_queue.results(104))
    assert not [b for t, b in server_queue.seen if t == contract.TASK_RESULT and b["result"]["probe_id"] == 103]


def quick(probe_id: int, **overrides) -> dict:
    """A command for a0 that answers at once: its master's name does not resolve."""
    return command(
        1,
        f"quick-{probe_id}-{os.getpid()}",
        node="a0",
        probe_id=probe_id,
        master_address="no-such-host.invalid",
        **overrides,
    )


@pytest.mark.timeout(90)
def test_it_drops_commands_the_server_did_not_sign_for_it(agents_running, sender, server_queue):
    send(sender, quick(111), auth=None)  # unsigned
    send(sender, quick(112), key=KEYS["a1"])  # signed with another node's key
    send(sender, quick(113), key=signing.new_key("a0"))  # a key the agent does not hold (revoked, forged)
    stale = quick(114)
    send(sender, stale, auth=signing.sign(stale, KEYS["a0"], "command", now=time.time() - 3600))
    moved = quick(115)
    send(sender, moved, auth=signing.sign(moved, KEYS["a0"], "result"))  # a signature made for something else
    tampered = quick(116)
    auth = signing.sign(tampered, KEYS["a0"], "command")
    send(sender, {**tampered, "env": {"NCCL_DEBUG": "INFO"}}, auth=auth)
    replayed = quick(117)
    auth = signing.sign(replayed, KEYS["a0"], "command")
    send(sender, replayed, auth=auth)
    send(sender, replayed, auth=auth)  # the same message again: Redis access replays it
    send(sender, quick(118))
    server_queue.results(118, count=1)  # the agent serves commands in order: everything before it is done
    answered = [b["result"]["probe_id"] for t, b in server_queue.seen if t == contract.TASK_RESULT]
    assert [p for p in answered if 111 <= p <= 117] == [117]


@pytest.mark.timeout(90)
def test_a_probe_sent_again_runs_once(agents_running, sender, server_queue):
    # What the server's outbox sends after a worker died around a publish: the same probe id, rank and
    # rendezvous in a newly signed command with a later expiry. The agent ran it already: the copy is dropped.
    send(sender, quick(121, expires_at=time.time() + 60))
    send(sender, quick(121, expires_at=time.time() + 61))
    other = command(1, f"other-{os.getpid()}", node="a0", probe_id=121, master_address="no-such-host.invalid")
    send(sender, other)  # another attempt at the probe (a new rendezvous): it runs
    send(sender, quick(122))
    server_queue.results(122, count=1)
    answered = [b["result"]["probe_id"] for t, b in server_queue.seen if t == contract.TASK_RESULT]
    assert answered.count(121) == 2


@pytest.mark.timeout(120)
def test_a_stopped_peer_times_out_and_the_agents_pass_the_next_probe(agents_running, sender, server_queue):
    send_pair(
        sender,
        105,
        sizes=[1024, 4096, 16384, 65536, 262144],
        iterations=200,
        warmup=0,
        timeouts={"collective": 60.0, "bandwidth": 60.0},
        deadline_s=10.0,
    )
    agent = agents_running["a1"].pid
    end = time.monotonic() + 30
    stopped = None
    while stopped is None and time.monotonic() < end:
        for pid, workdir in probe_processes(agent):
            stages = workdir / "stages.jsonl"
            if stages.exists() and '"event": "size"' in stages.read_text():
                os.kill(pid, signal.SIGSTOP)
                stopped = pid
        time.sleep(0.05)
    assert stopped, "a1's probe never reached the bandwidth stage"
    for result in server_queue.results(105):
        assert (result["status"], result["stage"], result["reason"]) == ("timeout", "bandwidth", "collective_timeout")
    send_pair(sender, 106)
    assert [r["status"] for r in server_queue.results(106)] == ["ok", "ok"]


@pytest.mark.timeout(60)
def test_a_probe_does_not_outlive_its_agent(broker, sender, server_queue, tmp_path):
    agent = spawn(
        agent_args("a9", "127.0.0.1", broker, key_file(tmp_path, "a9")),
        tmp_path / "a9.log",
        env=python_env(CLUSTER_HEALTH_HEARTBEAT_S="1"),
    )
    try:
        # Rank 1 of a pair whose master never comes: it waits in the store stage for a minute.
        send(sender, command(1, "orphan-rdv-1", node="a9", probe_id=107, timeouts={"store": 60.0}, deadline_s=90.0))
        end = time.monotonic() + 30
        probes = []
        while not probes and time.monotonic() < end:
            probes = probe_processes(agent.pid)
            time.sleep(0.1)
        assert probes, "the agent never started the probe"
        os.kill(agent.pid, signal.SIGKILL)
        agent.wait(timeout=10)
        time.sleep(1.0)
        assert process_state(probes[0][0]) in (None, "Z"), "the probe is still running without its agent"
    finally:
        stop_process(agent)


@pytest.mark.timeout(60)
def test_remote_control_cannot_stop_an_agent(agents_running, sender, server_queue):
    from agents.worker import Agent

    assert Agent("x0", "127.0.0.1", "redis://127.0.0.1:1/0").app.conf.worker_enable_remote_control is False
    sender.control.broadcast("shutdown")  # what anyone who reaches Redis could send
    time.sleep(3)
    assert all(proc.poll() is None for proc in agents_running.values())
    send(sender, quick(120))
    assert server_queue.results(120, count=1)[0]["node"] == "a0"


def test_the_agent_runs_its_probe_task_and_none_of_celerys_own(agents_running, sender, server_queue):
    """celery.map, celery.chunks and the rest are registered in every Celery app: a message naming one
    would run it with arguments of the sender's choosing. The agent's app has one task."""
    from agents.worker import Agent

    assert set(Agent("x0", "127.0.0.1", "redis://127.0.0.1:1/0").app.tasks) == {contract.TASK_PROBE}
    signature = {"task": contract.TASK_PROBE, "args": [], "kwargs": {}, "options": {}, "subtask_type": None}
    sender.send_task("celery.map", args=[signature, [[quick(131)]]], queue=contract.agent_queue("a0"))
    sender.send_task("celery.chunks", args=[signature, [[quick(132)]], 1], queue=contract.agent_queue("a0"))
    send(sender, quick(133))
    assert server_queue.results(133, count=1)[0]["node"] == "a0"
    assert not [b for t, b in server_queue.seen if t == contract.TASK_RESULT and b["result"]["probe_id"] in (131, 132)]
    assert all(proc.poll() is None for proc in agents_running.values())
