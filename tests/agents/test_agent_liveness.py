"""An agent whose Celery worker stopped taking commands starts itself again (agents/liveness.py).

The real case: the broker goes away between a probe's result and its ack. The worker logs
"Couldn't ack", never reconnects and takes nothing more, while its heartbeats go on. Here a
proxy between the agent and a private Redis drops every connection right after the result
went through, before the ack can, and refuses new ones for a moment: the ack fails as it did
when Redis restarted under run 33's bed.
"""

from __future__ import annotations

import socket
import sys
import threading
import time

import pytest
from celery import Celery

from agents import contract, liveness
from devtools.devstack import run_to_end
from devtools.services import RedisServer, python_env, spawn, stop_process
from tests.support.agent_fixtures import command, drain_until

pytestmark = pytest.mark.timeout(120)


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def watch_of(queue: list, deaf_after_s: float = 10.0) -> tuple[liveness.QueueWatch, Clock]:
    """A watch on ``queue`` (its last item is the oldest; an OSError item stands for a broker away)."""
    clock = Clock()

    def oldest():
        if queue and isinstance(queue[-1], OSError):
            raise queue[-1]
        return queue[-1] if queue else None

    return liveness.QueueWatch(oldest, deaf_after_s, clock=clock), clock


def looks(watch: liveness.QueueWatch, clock: Clock, every_s: float, times: int, running: bool = False) -> list[bool]:
    seen = []
    for _ in range(times):
        seen.append(watch.deaf(running))
        clock.now += every_s
    return seen


def test_a_message_left_oldest_while_idle_is_deafness():
    queue = [b"second", b"first"]
    watch, clock = watch_of(queue)
    assert looks(watch, clock, 5.0, 4) == [False, False, True, True]  # first seen at 0, still there at 10


def test_a_worker_taking_its_commands_is_never_deaf():
    queue = [b"m3", b"m2", b"m1"]
    watch, clock = watch_of(queue)
    seen = []
    for _ in range(3):  # a slow taker: one message every 9 s, each looked at twice
        seen += looks(watch, clock, 4.5, 2)
        queue.pop()
    assert seen == [False] * 6
    assert looks(watch, clock, 5.0, 5) == [False] * 5  # empty


def test_a_running_command_or_a_broker_away_starts_the_wait_over():
    queue = [b"waiting"]
    watch, clock = watch_of(queue)
    assert looks(watch, clock, 5.0, 4, running=True) == [False] * 4  # the command holds the worker
    assert looks(watch, clock, 5.0, 2) == [False, False]  # waits from the end of the command
    queue.append(OSError("connection refused"))
    assert looks(watch, clock, 5.0, 3) == [False] * 3
    queue.pop()
    assert looks(watch, clock, 5.0, 3) == [False, False, True]


@pytest.mark.parametrize(("raw", "wanted"), [("", 15.0), ("4", 4.0), ("0.5", None), ("x", None), ("99999", None)])
def test_the_setting_is_a_number_of_seconds_in_range(raw, wanted):
    if wanted is None:
        with pytest.raises(ValueError, match=liveness.DEAF_AFTER_ENV):
            liveness.deaf_after_s({liveness.DEAF_AFTER_ENV: raw})
    else:
        assert liveness.deaf_after_s({liveness.DEAF_AFTER_ENV: raw}) == wanted


class CuttingProxy:
    """TCP between the agent and Redis; once armed, it lets one command carrying ``trigger`` through,
    relays Redis's reply to it, then drops every connection (holding back anything sent since)
    and refuses new ones for ``down_s``."""

    def __init__(self, upstream_port: int):
        self.upstream_port = upstream_port
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.listener.settimeout(0.2)
        self.port = self.listener.getsockname()[1]
        self.lock = threading.Lock()
        self.socks: list[socket.socket] = []
        self.trigger: bytes | None = None
        self.down_s = 0.0
        self.frozen_by: socket.socket | None = None  # the client whose command was the trigger
        self.down_until = 0.0
        self.cut = threading.Event()
        self.stopped = False
        self.threads = [threading.Thread(target=self.accept_loop, daemon=True)]
        self.threads[0].start()

    def arm(self, trigger: bytes, down_s: float) -> None:
        with self.lock:
            self.trigger, self.down_s = trigger, down_s
            self.cut.clear()

    def accept_loop(self) -> None:
        while not self.stopped:
            try:
                client, _ = self.listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            if time.monotonic() < self.down_until:
                client.close()  # the broker is away
                continue
            upstream = socket.create_connection(("127.0.0.1", self.upstream_port))
            with self.lock:
                self.socks += [client, upstream]
            for args in ((client, upstream, client, True), (upstream, client, client, False)):
                thread = threading.Thread(target=self.pump, args=args, daemon=True)
                thread.start()
                self.threads.append(thread)

    def pump(self, src: socket.socket, dst: socket.socket, client: socket.socket, outbound: bool) -> None:
        tail = b""
        try:
            while data := src.recv(65536):
                with self.lock:
                    if outbound and self.frozen_by is not None:
                        continue  # sent after the trigger: never reaches Redis
                    dst.sendall(data)
                    if outbound and self.trigger is not None and self.trigger in tail + data:
                        self.frozen_by = client
                    elif not outbound and self.frozen_by is client:
                        self.drop_all()
                        return
                    tail = data[-256:]
        except OSError:
            pass

    def drop_all(self) -> None:  # with the lock held
        self.down_until = time.monotonic() + self.down_s
        for sock in self.socks:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            sock.close()
        self.socks, self.trigger, self.frozen_by = [], None, None
        self.cut.set()

    def close(self) -> None:
        self.stopped = True
        with self.lock:
            self.down_s = 0.0
            self.drop_all()
        self.listener.close()
        for thread in self.threads:
            thread.join(timeout=5)


@pytest.fixture
def redis_behind_proxy(tmp_path):
    server = RedisServer(tmp_path)
    server.start()
    proxy = CuttingProxy(server.port)
    try:
        yield server, proxy
    finally:
        proxy.close()
        server.stop()


def send_probe(url: str, cmd: dict) -> None:
    app = Celery("sender", broker=url, set_as_current=False, fixups=[])
    try:
        app.send_task(contract.TASK_PROBE, kwargs={"command": cmd}, queue=contract.agent_queue("n1"))
    finally:
        app.close()


def result_of(url: str, probe_id: int, timeout: float) -> dict:
    def wanted(task, body):
        return task == contract.TASK_RESULT and body["result"]["probe_id"] == probe_id

    return drain_until(url, wanted, timeout)["result"]


def test_an_agent_deaf_after_a_failed_ack_starts_again_and_takes_its_commands(redis_behind_proxy, tmp_path):
    server, proxy = redis_behind_proxy
    env = python_env(
        CLUSTER_HEALTH_ALLOW_UNSIGNED_AGENTS="1",
        CLUSTER_HEALTH_HEARTBEAT_S="1",
        CLUSTER_HEALTH_AGENT_DEAF_AFTER_S="4",
        CLUSTER_HEALTH_WARM_PROBES="0",
    )
    env.pop("CLUSTER_HEALTH_AGENT_KEY_FILE", None)
    log = tmp_path / "agent.log"
    broker_url = f"redis://127.0.0.1:{proxy.port}/0"
    args = [sys.executable, "-m", "agents", "run", "--name", "n1", "--address", "127.0.0.1", "--broker", broker_url]
    agent = spawn(args, log, env=env)
    try:
        drain_until(server.url, lambda task, body: task == contract.TASK_HEARTBEAT, 30)
        proxy.arm(contract.TASK_RESULT.encode(), down_s=2.0)
        send_probe(server.url, command(1, probe_id=101, deadline_s=10.0))  # its peer never comes: fails fast
        assert proxy.cut.wait(30), log.read_text()[-3000:]
        assert result_of(server.url, 101, 10)["status"] in ("failed", "timeout")
        send_probe(server.url, command(1, probe_id=102, deadline_s=40.0))
        second = result_of(server.url, 102, 40)
        text = log.read_text()
        assert "Couldn't ack" in text  # the worker was made deaf as run 33's was
        assert "restarting this agent in place" in text, text[-3000:]
        assert second["status"] in ("failed", "timeout") and second["node"] == "n1"
        assert agent.poll() is None  # the same process throughout
    finally:
        stop_process(agent)


def test_restarting_in_place_keeps_the_process_its_command_line_and_environment(tmp_path):
    marks = tmp_path / "starts"
    code = (
        "import os, sys\n"
        "from agents import liveness\n"
        f"marks = {str(marks)!r}\n"
        "with open(marks, 'a') as f: f.write(f'{os.getpid()} {sys.argv[1:]} {os.environ[\"MARK\"]}\\n')\n"
        "if len(open(marks).read().splitlines()) == 1:\n"
        "    liveness.restart_in_place(before=lambda: print('before', flush=True))\n"
    )
    done = run_to_end([sys.executable, "-c", code, "--an", "argument"], env=python_env(MARK="kept"))
    assert done.returncode == 0, done.stderr
    first, second = marks.read_text().splitlines()
    assert first == second and first.endswith("['--an', 'argument'] kept")
    assert done.stdout == "before\n"
