"""The agent survives a Redis restart: it reconnects by itself, heartbeats resume and commands are served."""

from __future__ import annotations

import time

import pytest
from celery import Celery

from agents import contract, signing
from devtools.services import RedisServer, agent_args, python_env, spawn, stop_process
from tests.support.agent_fixtures import command, drain_until


@pytest.mark.timeout(120)
def test_the_agent_reconnects_after_redis_restarts(tmp_path):
    redis = RedisServer(tmp_path)
    redis.start()
    agent = None
    key = signing.new_key("r0")
    signing.write_key_file(tmp_path / "r0.key", key)
    try:
        agent = spawn(
            agent_args("r0", "127.0.0.1", redis.url, tmp_path / "r0.key"),
            tmp_path / "agent.log",
            env=python_env(CLUSTER_HEALTH_HEARTBEAT_S="1"),
        )
        drain_until(redis.url, lambda task, body: task == contract.TASK_HEARTBEAT, 40)

        redis.restart()  # same port, nothing kept: queues, bindings and messages are gone
        restarted = time.time()
        beat = drain_until(
            redis.url,
            lambda task, body: task == contract.TASK_HEARTBEAT and body["heartbeat"]["sent_at"] > restarted,
            40,
        )
        assert beat["heartbeat"]["node"] == "r0"

        sender = Celery("test-server", broker=redis.url)
        sender.conf.update(task_serializer="json", accept_content=["json"])
        # Served after the restart: a half whose master name does not resolve answers at once.
        cmd = command(1, node="r0", probe_id=301, master_address="no-such-host.invalid")
        deadline = time.monotonic() + 40
        while True:  # the worker may still be re-declaring its queue: resend until it answers
            sender.send_task(
                contract.TASK_PROBE,
                kwargs={"command": cmd, "auth": signing.sign(cmd, key, "command")},
                queue=contract.agent_queue("r0"),
            )
            try:
                body = drain_until(redis.url, lambda task, body: task == contract.TASK_RESULT, 8)
                break
            except AssertionError:
                assert time.monotonic() < deadline, (tmp_path / "agent.log").read_text()[-3000:]
        assert (body["result"]["probe_id"], body["result"]["reason"]) == (301, "dns")
        assert agent.poll() is None
    finally:
        if agent:
            stop_process(agent)
        redis.stop()
