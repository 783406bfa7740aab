"""The reaper turns silence into timeout or offline, and no sweep stalls."""

from datetime import timedelta

import pytest
from django.utils import timezone

from cluster_health import dispatch, reaper
from cluster_health.models import Finding, Node, PairProbe, Sweep
from tests.sweep_driver import heartbeat, result_for

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
    probe = PairProbe.objects.get(sweep=sweep)
    assert (probe.status, probe.stage, probe.reason) == ("timeout", "store", "store_timeout")
    sweep.refresh_from_db()
    assert sweep.status == "finished" and sweep.verdict == "fail"


def test_it_marks_pairs_of_a_silent_node_offline_and_blames_the_node(driver):
    for n in ("n0", "n1", "n2", "n3"):
        heartbeat(n)
    sweep = driver.sweep(kind="connectivity")
    cmds = driver.take()
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


def test_it_does_not_read_waiting_heartbeats_as_silence(driver, settings):
    import redis

    from agents import contract

    for n in ("n0", "n1"):
        heartbeat(n)
    sweep = driver.sweep(kind="connectivity")
    for c in driver.take():
        if c["node"] == "n0":
            driver.ingest(result_for(c))
    Node.objects.filter(name="n1").update(last_heartbeat=timezone.now() - timedelta(minutes=5))
    inbox = redis.Redis.from_url(settings.REDIS_URL)
    # The server worker was down: the agents' messages wait in its queue, unread.
    inbox.lpush(contract.SERVER_QUEUE, b"{}")
    try:
        assert reaper.server_backlog() == 1
        driver.reap()
        assert PairProbe.objects.get(sweep=sweep).status == "running"
    finally:
        inbox.delete(contract.SERVER_QUEUE)
    driver.reap()
    probe = PairProbe.objects.get(sweep=sweep)
    assert (probe.status, probe.reason) == ("offline", "agent_offline")
