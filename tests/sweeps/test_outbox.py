"""A round committed but never sent (its worker killed in between) is sent again by the reaper, once."""

import time
from datetime import timedelta

import pytest
from django.utils import timezone

from cluster_health import sweeps
from cluster_health.models import GroupProbe, Node, PairProbe, Sweep
from cluster_health.queues import dispatch
from cluster_health.sweeps import outbox
from devtools.sweep_driver import heartbeat, result_for

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("memory_channel_layer")]


def start_killed(driver, django_capture_on_commit_callbacks, **request):
    """Request and start a sweep whose worker dies right after the round's commit: nothing is sent."""
    sweep = driver.run(sweeps.request_sweep, source="command", **request)
    with dispatch.capture() as sent, django_capture_on_commit_callbacks(execute=False):
        sweeps.start_sweep(sweep.pk)
    assert sent == []
    return sweep


def test_a_round_its_worker_never_sent_is_sent_again_and_the_sweep_passes(driver, django_capture_on_commit_callbacks):
    heartbeat("n0"), heartbeat("n1"), heartbeat("n2")
    sweep = start_killed(driver, django_capture_on_commit_callbacks, kind="pairs", pairs=[["n0", "n1"], ["n1", "n2"]])
    running = list(PairProbe.objects.filter(sweep=sweep, status="running"))
    assert running and all(p.sent_at is None for p in running)

    assert driver.reap()["resent"] == 0  # the publish may still be under way
    assert driver.take() == []

    # Long after: past the probes' deadline too, so without the outbox they would close as timeouts.
    later = timezone.now() + timedelta(seconds=dispatch.server_deadline_s(60) + outbox.UNSENT_GRACE_S)
    Node.objects.update(last_heartbeat=later)
    counts = driver.reap(later)
    assert counts["resent"] == len(running) and counts["timeout"] == 0
    commands = driver.take()
    assert sorted((c["probe_id"], c["rank"], c["rendezvous"]) for c in commands) == sorted(
        (p.pk, rank, p.rendezvous) for p in running for rank in (0, 1)
    )
    assert all(c["expires_at"] > time.time() for c in commands)  # a fresh expiry, not the lost round's
    for probe in PairProbe.objects.filter(pk__in=[p.pk for p in running]):
        assert probe.status == "running" and probe.sent_at is not None and probe.deadline > later
    assert driver.reap(later + timedelta(seconds=outbox.UNSENT_GRACE_S * 2))["resent"] == 0  # sent once

    for c in commands:
        driver.ingest(result_for(c))
    driver.answer_all()
    sweep.refresh_from_db()
    assert (sweep.status, sweep.verdict) == ("finished", "pass")


def test_a_sent_round_is_not_sent_again(driver):
    heartbeat("n0"), heartbeat("n1")
    sweep = driver.sweep(kind="pairs", pairs=[["n0", "n1"]])
    assert len(driver.take()) == 2
    assert PairProbe.objects.get(sweep=sweep).sent_at is not None
    assert driver.reap(timezone.now() + timedelta(seconds=outbox.UNSENT_GRACE_S + 1))["resent"] == 0
    assert driver.take() == []


def test_a_probe_closed_meanwhile_is_not_sent(driver, django_capture_on_commit_callbacks):
    heartbeat("n0"), heartbeat("n1")
    sweep = start_killed(driver, django_capture_on_commit_callbacks, kind="pairs", pairs=[["n0", "n1"]])
    closed = PairProbe.objects.get(sweep=sweep)
    PairProbe.objects.filter(sweep=sweep).update(status="timeout")
    assert driver.reap(timezone.now() + timedelta(seconds=outbox.UNSENT_GRACE_S + 1))["resent"] == 0
    # The sweep moves on to its confirmation pass, a probe of its own: the closed one is never sent.
    sent = driver.take()
    assert closed.pk not in {c["probe_id"] for c in sent}
    assert {c["probe_id"] for c in sent} == set(
        PairProbe.objects.filter(sweep=sweep, round__gte=2).values_list("pk", flat=True)
    )


def test_a_group_collective_never_marked_sent_is_sent_again(driver):
    heartbeat("n0"), heartbeat("n1"), heartbeat("n2")
    sweep = driver.sweep(kind="full", sizes=[1024])
    first = []
    driver.answer_all(lambda c: result_for(c) if c["kind"] == "pair" else first.append(c))  # the group stays silent
    group = GroupProbe.objects.get(sweep=sweep)
    assert group.status == "running" and group.sent_at is not None and len(first) == 3
    GroupProbe.objects.filter(pk=group.pk).update(sent_at=None)  # killed after the publish, before the mark

    counts = driver.reap(timezone.now() + timedelta(seconds=outbox.UNSENT_GRACE_S + 1))
    assert counts["resent"] == 1
    again = driver.take()
    assert sorted((c["node"], c["rank"], c["probe_id"], c["rendezvous"]) for c in again) == sorted(
        (c["node"], c["rank"], c["probe_id"], c["rendezvous"]) for c in first
    )
    for c in again:
        driver.ingest(result_for(c))
    sweep = Sweep.objects.get(pk=sweep.pk)
    assert (sweep.status, sweep.verdict) == ("finished", "pass")
