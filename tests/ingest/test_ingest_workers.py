"""Halves sent as agents send them (one ``server.result`` message each, on queue server.ingest) through the
real server workers and their ingest consumers; and on queue server, as agents before the consumer sent them."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pytest
import redis

from agents import contract, signing
from cluster_health import vocabulary
from cluster_health.models import PairProbe
from cluster_health.queues import keys
from devtools import services
from devtools.sweep_driver import result_for
from tests.support.sweep_setup import open_pairs, wait_closed

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

PAIRS = 200  # open pairs at once: enough halves for several batches per shard


def send_half(stack, result: dict, queue: str | None = None) -> None:
    """Send one half as an agent does (agents/worker.py: one server.result message per half, signed, on its
    node's own ingest list unless ``queue`` says otherwise)."""
    from cluster_health.celery import app

    auth = signing.sign(result, stack.keys[result["node"]], "result")
    queue = queue or contract.ingest_queue(result["node"])
    app.send_task(contract.TASK_RESULT, kwargs={"result": result, "auth": auth}, queue=queue)


def consumers_waiting(url: str) -> int:
    """Ingest consumers alive right now (each renews its lease while it waits for messages)."""
    client = redis.Redis.from_url(url)
    try:
        return sum(1 for name in keys.registered(client) if client.exists(keys.lease_key(name)))
    finally:
        client.close()


def test_it_applies_a_half_sent_as_a_message_within_a_second(stack, driver):
    services.wait_until(lambda: "ready" in stack.log("worker"), 60, message="server worker ready")
    services.wait_until(lambda: consumers_waiting(stack.redis.url) >= 1, 60, message="its ingest consumer ready")
    sweep_id, cmds = open_pairs(stack, driver, "lat", 1)
    send_half(stack, result_for(cmds[0]))
    send_half(stack, result_for(cmds[1]))
    # On arrival, not on a timer: the reaper's tick (REAPER_INTERVAL_S) is 3 s. Unloaded this takes about 0.1 s;
    # with both cores busy under the whole suite it took 1.01 s once (an idle consumer looks every 50 ms and
    # finds a new node's list within 0.2 s), so the bound sits between the two, not at BLOCK_S.
    assert wait_closed(sweep_id, 1, timeout=10) < 2.0


def test_a_half_sent_on_the_server_queue_is_still_applied(stack, driver):
    """Agents from before the ingest consumer send halves as server.result tasks on queue server."""
    sweep_id, cmds = open_pairs(stack, driver, "old", 1)
    for cmd in cmds:
        send_half(stack, result_for(cmd), queue=vocabulary.SERVER_QUEUE)
    wait_closed(sweep_id, 1, timeout=30)


def test_a_half_an_agent_of_the_previous_version_sent_on_the_shared_list_is_still_applied(stack, driver):
    """Agents before per-node lists sent every half on server.ingest: drained during an upgrade."""
    sweep_id, cmds = open_pairs(stack, driver, "prev", 1)
    for cmd in cmds:
        send_half(stack, result_for(cmd), queue=contract.INGEST_QUEUE)
    wait_closed(sweep_id, 1, timeout=30)


def test_two_workers_share_the_ingest_and_apply_every_half_once(stack, driver):
    stack.sup.start("worker2", services.server_worker_args("server2@test"))
    try:
        services.wait_until(lambda: "ready" in stack.log("worker2"), 60, message="second worker ready")
        # Both consumers idle on the queue: the first messages wake each of them.
        services.wait_until(lambda: consumers_waiting(stack.redis.url) >= 2, 60, message="two consumers waiting")
        before = {name: stack.log(name).count("took ") for name in ("worker", "worker2")}
        sweep_id, cmds = open_pairs(stack, driver, "two", PAIRS)
        for cmd in cmds:
            send_half(stack, result_for(cmd, busbw=4.0))
        wait_closed(sweep_id, PAIRS, timeout=60)
        took = {name: stack.log(name).count("took ") - before[name] for name in before}
    finally:
        stack.sup.stop("worker2")
    assert all(took.values()), f"both workers' consumers take batches: {took}"
    probes = PairProbe.objects.filter(sweep_id=sweep_id)
    assert {p.busbw_gbps for p in probes} == {4.0}
    assert all(p.half_a and p.half_b for p in probes)


def test_a_drainer_killed_mid_batch_loses_nothing(stack, driver, settings):
    """The halves a killed drainer held are applied by the worker's next drain, once."""
    sweep_id, cmds = open_pairs(stack, driver, "kill", PAIRS)
    client = redis.Redis.from_url(settings.REDIS_URL)
    marker = f"test:drainer-in-batch:{sweep_id}"
    # The worker frozen while the halves wait, so that the drainer below is the one that takes them (the
    # worker's reaper drains every few seconds, and took them all first once); it is let go after the kill.
    worker = stack.sup.procs["worker"].pid
    os.killpg(worker, signal.SIGSTOP)
    drainer = None
    try:
        for cmd in cmds:  # what result tasks appended while the shard's drainer was busy
            half = result_for(cmd)
            client.rpush(
                keys.pending_key(keys.shard_of(half)),
                keys.sealed(json.dumps(half), keys.seal_key(settings.SECRET_KEY)),
            )
        # A drainer in its own process, with a short lock so the worker takes over soon after the kill. It dies
        # in its batch's transaction: its apply step says so and waits there, and the kill comes then (a drainer
        # left to run could commit its batch between the test seeing it in processing and the kill).
        env = {**stack.env, "CLUSTER_HEALTH_INGEST_DRAIN_LOCK_S": "2"}
        code = (
            "import time, django, redis; django.setup()\n"
            "from django.conf import settings\n"
            "from cluster_health.ingest import buffer, results\n"
            "def stall(halves):\n"
            f"    redis.Redis.from_url(settings.REDIS_URL).set({marker!r}, len(halves))\n"
            "    time.sleep(120)\n"
            "results.ingest_results = stall\n"
            "buffer.drain_all()\n"
        )
        drainer = subprocess.Popen(
            [sys.executable, "-c", code],
            env=env,
            cwd=services.ROOT,
            start_new_session=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        services.wait_until(
            lambda: client.exists(marker) or drainer.poll() is not None, 60, interval=0.01, message="a batch held"
        )
        os.killpg(drainer.pid, signal.SIGKILL)
        drainer.wait(10)
        held = int(client.get(marker) or 0)
        left = sum(client.llen(keys.processing_key(s)) for s in range(keys.SHARDS))
        applied = PairProbe.objects.filter(sweep_id=sweep_id, status="ok").count()  # before the worker goes on
    finally:
        os.killpg(worker, signal.SIGCONT)
        if drainer is not None:
            services.stop_process(drainer)
        client.delete(marker)
        client.close()
    assert held and left >= held, f"killed holding a batch of {held} halves; {left} in processing"
    assert applied == 0, "nothing of the killed drainer's batch was committed"
    wait_closed(sweep_id, PAIRS, timeout=60)  # the reaper's drain, once the lock expired
    assert all(p.half_a and p.half_b for p in PairProbe.objects.filter(sweep_id=sweep_id))
