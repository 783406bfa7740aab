"""The reaper turns silence into timeout or offline, and no sweep stalls."""

from datetime import timedelta

import pytest
from django.utils import timezone

from cluster_health import vocabulary
from cluster_health.models import Finding, Node, PairProbe, Sweep
from cluster_health.queues import backlog, dispatch
from cluster_health.sweeps import reaper
from devtools.sweep_driver import heartbeat, result_for
from tests.support.sweep_setup import connectivity_sweep, queued_heartbeat, reserved_heartbeat, signed

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("memory_channel_layer")]


def test_it_times_out_a_probe_past_its_deadline_keeping_the_half_that_arrived(driver):
    heartbeat("n0"), heartbeat("n1")
    sweep = driver.sweep(kind="pairs", pairs=[["n0", "n1"]])
    a, b = sorted(driver.take(), key=lambda c: c["rank"])
    driver.ingest(result_for(a, status="failed", stage="store", reason="store_timeout", hint="store unreachable"))
    assert driver.reap()["timeout"] == 0  # not yet due
    heartbeat("n0"), heartbeat("n1")
    later = timezone.now() + timedelta(seconds=dispatch.server_deadline_s(a["deadline_s"]) + 1)
    Node.objects.update(last_heartbeat=later)
    assert driver.reap(later)["timeout"] == 1
    probe = PairProbe.objects.get(pk=a["probe_id"])
    assert (probe.status, probe.stage, probe.reason) == ("timeout", "store", "store_timeout")
    # Probed again by the confirmation pass, it times out again: confirmed, and the sweep fails.
    again = driver.take()
    assert {c["probe_id"] for c in again} != {a["probe_id"]}
    for c in again:
        driver.ingest(result_for(c, status="failed", stage="store", reason="store_timeout", hint="store unreachable"))
    sweep.refresh_from_db()
    assert sweep.status == "finished" and sweep.verdict == "fail"
    probe.refresh_from_db()
    assert probe.evidence["confirmation"]["outcome"] == "confirmed"
    assert PairProbe.objects.filter(sweep=sweep).count() == 1  # the pass's own row folded into the pair's


def test_it_marks_pairs_of_a_silent_node_offline_and_blames_the_node(driver):
    sweep, cmds = connectivity_sweep(driver)
    # n3 answers round 1, then its agent stops.
    for c in cmds:
        driver.ingest(result_for(c))
    Node.objects.filter(name="n3").update(last_heartbeat=timezone.now() - timedelta(hours=1))
    for _ in range(5):
        pending = driver.take()
        for c in pending:
            if c["node"] != "n3":
                driver.ingest(result_for(c))
        driver.reap()
    sweep.refresh_from_db()
    assert sweep.status == "finished" and sweep.verdict == "fail"
    offline = PairProbe.objects.filter(sweep=sweep, status="offline")
    assert offline.count() == 2
    assert all(p.reason == "agent_offline" for p in offline)
    findings = list(Finding.objects.filter(sweep=sweep, severity="fail").values_list("code", "subject"))
    assert findings == [("node_offline", "n3")]


def test_it_advances_a_sweep_whose_advance_was_lost(driver):
    heartbeat("n0"), heartbeat("n1")
    sweep = driver.sweep(kind="pairs", pairs=[["n0", "n1"]])
    driver.take()
    # The round's probes were closed, but the worker died before advancing.
    PairProbe.objects.filter(sweep=sweep).update(status="ok")
    assert Sweep.objects.get(pk=sweep.pk).status == "running"
    driver.reap()
    assert Sweep.objects.get(pk=sweep.pk).status == "finished"


def test_it_starts_a_sweep_whose_start_task_was_lost(driver):
    heartbeat("n0"), heartbeat("n1")
    from cluster_health import sweeps

    sweep = driver.run(sweeps.request_sweep, source="api", kind="connectivity")
    assert driver.reap(timezone.now() + timedelta(minutes=5))["started"] == 1
    assert Sweep.objects.get(pk=sweep.pk).status == "running"


def test_it_closes_a_round_immediately_when_a_node_is_already_offline(driver):
    heartbeat("n0"), heartbeat("n1")
    Node.objects.filter(name="n1").update(last_heartbeat=timezone.now() - timedelta(hours=1))
    sweep = driver.sweep(kind="pairs", pairs=[["n0", "n1"]])
    assert driver.take() == []
    sweep.refresh_from_db()
    assert sweep.status == "finished" and sweep.verdict == "fail"
    assert reaper.reap()["offline"] == 0


def n1_silent_after_n0_answered(driver):
    """A connectivity sweep of n0 and n1 in which n0 answered and n1 has been silent for five minutes."""
    sweep, cmds = connectivity_sweep(driver, ("n0", "n1"))
    for c in cmds:
        if c["node"] == "n0":
            driver.ingest(result_for(c))
    Node.objects.filter(name="n1").update(last_heartbeat=timezone.now() - timedelta(minutes=5))
    return sweep


def assert_offline_only_once_read(driver, sweep, waiting, discard):
    """While ``waiting()`` (n1's message unread) the reaper keeps the probe running; after ``discard()``, offline."""
    try:
        assert waiting()
        driver.reap()
        assert PairProbe.objects.get(sweep=sweep).status == "running"
    finally:
        discard()
    driver.reap()
    probe = PairProbe.objects.get(sweep=sweep)
    assert (probe.status, probe.reason) == ("offline", "agent_offline")


def test_it_does_not_read_waiting_heartbeats_as_silence(driver, settings):
    import redis

    sweep = n1_silent_after_n0_answered(driver)
    inbox = redis.Redis.from_url(settings.REDIS_URL)
    # The server worker was down: the agents' messages wait in its queue, unread.
    inbox.lpush(vocabulary.SERVER_QUEUE, queued_heartbeat("n1"))
    assert_offline_only_once_read(
        driver, sweep, lambda: backlog.server_backlog().nodes == {"n1"}, lambda: inbox.delete(vocabulary.SERVER_QUEUE)
    )


def test_it_does_not_judge_a_node_whose_heartbeat_a_worker_holds_unacked(driver, settings):
    import time

    import redis

    sweep = n1_silent_after_n0_answered(driver)
    broker = redis.Redis.from_url(settings.REDIS_URL)
    # A worker back from an outage prefetched n1's heartbeat: the queue's list is empty, and
    # the message sits in the transport's unacked hash until the worker applies it.
    tag = "test-reaper-reserved-n1"
    broker.hset("unacked", tag, reserved_heartbeat("n1"))
    broker.zadd("unacked_index", {tag: time.time()})
    assert_offline_only_once_read(
        driver,
        sweep,
        lambda: backlog.server_backlog().nodes >= {"n1"},
        lambda: (broker.hdel("unacked", tag), broker.zrem("unacked_index", tag)),
    )


def test_it_keeps_a_probe_open_past_its_deadline_while_its_result_waits(driver, settings):
    import redis

    from agents import contract

    heartbeat("n0"), heartbeat("n1")
    sweep = driver.sweep(kind="pairs", pairs=[["n0", "n1"]])
    a, b = sorted(driver.take(), key=lambda c: c["rank"])
    driver.ingest(result_for(a))
    later = timezone.now() + timedelta(seconds=dispatch.server_deadline_s(a["deadline_s"]) + 1)
    Node.objects.update(last_heartbeat=later)
    # b's half was sent before the deadline and waits for a worker that is down.
    waiting = json_message(contract.TASK_RESULT, signed("result", result_for(b)))
    inbox = redis.Redis.from_url(settings.REDIS_URL)
    inbox.lpush(vocabulary.SERVER_QUEUE, waiting)
    try:
        assert driver.reap(later)["timeout"] == 0
    finally:
        inbox.lrem(vocabulary.SERVER_QUEUE, 0, waiting)
    driver.ingest(result_for(b))
    probe = PairProbe.objects.get(sweep=sweep)
    assert probe.status == "ok"


def test_a_half_waiting_from_another_node_defers_nothing_of_the_probe_it_names(driver, settings):
    """A node's genuine half that names a probe of two other nodes (a stolen node key, flooding its own
    ingest list) speaks only for that node: the probe it names is judged at its deadline all the same."""
    import redis

    from agents import contract

    heartbeat("n0"), heartbeat("n1"), heartbeat("n2")
    sweep = driver.sweep(kind="pairs", pairs=[["n0", "n1"]])
    a, b = sorted(driver.take(), key=lambda c: c["rank"])
    driver.ingest(result_for(a))
    later = timezone.now() + timedelta(seconds=dispatch.server_deadline_s(a["deadline_s"]) + 1)
    Node.objects.update(last_heartbeat=later)
    planted = {**result_for(b), "node": "n2"}  # n2 is no node of the probe: signed by n2's own key
    inbox = redis.Redis.from_url(settings.REDIS_URL)
    inbox.lpush(contract.ingest_queue("n2"), json_message(contract.TASK_RESULT, signed("result", planted)))
    try:
        seen = backlog.server_backlog()
        assert seen is not None and seen.complete and ("pair", b["probe_id"]) in seen.probes and "n2" in seen.nodes
        assert driver.reap(later)["timeout"] == 1
    finally:
        inbox.delete(contract.ingest_queue("n2"))
    assert PairProbe.objects.get(pk=b["probe_id"], sweep=sweep).status == "timeout"


def json_message(task: str, kwargs: dict) -> bytes:
    """A task message as Celery's Redis transport queues it."""
    import base64
    import json

    body = base64.b64encode(json.dumps([[], kwargs, {}]).encode()).decode()
    return json.dumps(
        {
            "body": body,
            "content-type": "application/json",
            "content-encoding": "utf-8",
            "headers": {"task": task, "id": f"test-{task}"},
            "properties": {"body_encoding": "base64"},
        }
    ).encode()


def test_it_checks_waiting_signatures_only_when_a_judgement_could_fall(driver):
    # A waiting message spares a silent node or an overdue probe; with neither, the reaper has no
    # use for the signatures of a round's waiting halves and leaves them unchecked.
    heartbeat("n0"), heartbeat("n1")
    driver.sweep(kind="pairs", pairs=[["n0", "n1"]])
    a, _b = sorted(driver.take(), key=lambda c: c["rank"])
    now = timezone.now()
    assert not reaper._anything_to_judge(now)
    later = now + timedelta(seconds=dispatch.server_deadline_s(a["deadline_s"]) + 1)
    Node.objects.update(last_heartbeat=later)
    assert reaper._anything_to_judge(later)  # past its deadline
    Node.objects.filter(name="n1").update(last_heartbeat=now - timedelta(minutes=5))
    assert reaper._anything_to_judge(now)  # a node of a running probe silent


def test_with_nothing_to_judge_it_does_not_read_the_backlog_and_still_advances_a_complete_round(driver, monkeypatch):
    """A healthy sweep's tick: nothing overdue, nobody silent, no forgotten sweep. Reading every waiting half
    (1,024 of them a round at 1,024 nodes) could spare nothing, so it is skipped; the round still advances."""
    sweep, cmds = connectivity_sweep(driver, ("n0", "n1", "n2", "n3"))
    reads = []
    monkeypatch.setattr(reaper, "server_backlog", lambda settle=True: reads.append(settle) or backlog.Backlog())
    for c in cmds:
        driver.ingest(result_for(c))
    assert driver.reap()["timeout"] == 0
    assert reads == []
    # Past the deadline there is something to judge: the backlog is read first.
    driver.take()
    later = timezone.now() + timedelta(minutes=10)
    Node.objects.update(last_heartbeat=later)
    driver.reap(later)
    assert reads == [False]
    sweep.refresh_from_db()
    assert sweep.current_round >= 2
