"""One bad sweep cannot stall the others: long joined text fits, a sweep that raises ends failed."""

from __future__ import annotations

import pytest

from cluster_health import sweeps
from cluster_health.models import Finding, PairProbe, Sweep
from cluster_health.sweeps import findings
from cluster_health.sweeps.request import SweepRequestError, clean_request
from devtools.sweep_driver import heartbeat

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("memory_channel_layer")]


def facts(torch: str) -> dict:
    return {
        "versions": {"torch": torch, "nccl": "2.21.5", "cuda": "12.4", "driver": "550.54", "python": "3.11"},
        "host": {"loopback": False},
        "env": {},
    }


def test_twelve_long_named_nodes_on_two_torch_versions_finish_their_sweep(driver):
    names = [f"gpu-node-{i:02d}-" + "x" * 48 for i in range(12)]
    assert all(len(n) == 60 for n in names)
    for i, name in enumerate(names):
        heartbeat(name, facts=facts("2.4.0" if i % 2 else "2.5.1"))
    sweep = driver.sweep(kind="full", sizes=[1024])
    driver.answer_all()
    sweep.refresh_from_db()
    assert sweep.status == "finished", sweep.error
    mismatch = Finding.objects.get(sweep=sweep, code="version_mismatch")
    assert len(mismatch.subject) > 200


def test_a_sweep_that_cannot_finish_ends_failed_and_the_others_go_on(driver, monkeypatch):
    for name in ("n0", "n1", "n2", "n3"):
        heartbeat(name)
    broken = driver.sweep(kind="pairs", pairs=[["n0", "n1"]], sizes=[1024])
    healthy = driver.sweep(kind="pairs", pairs=[["n2", "n3"]], sizes=[1024])
    real = findings.sweep_findings

    def poisoned(sweep):  # stands for any row the database refuses while the sweep closes
        if sweep.pk == broken.pk:
            raise ValueError("a value the database refused")
        return real(sweep)

    monkeypatch.setattr(findings, "sweep_findings", poisoned)
    driver.answer_all()
    broken.refresh_from_db(), healthy.refresh_from_db()
    assert (broken.status, healthy.status) == ("failed", "finished")
    assert "refused" in broken.error
    assert driver.reap()["advanced"] == 0  # nothing left that raises on every pass


def test_a_sweep_that_cannot_start_ends_failed_instead_of_coming_back(driver, monkeypatch):
    heartbeat("n0"), heartbeat("n1")
    sweep = driver.run(sweeps.request_sweep, source="command", kind="connectivity")
    monkeypatch.setattr(
        "cluster_health.sweeps.lifecycle._create_probes", lambda *a: (_ for _ in ()).throw(ValueError("refused row"))
    )
    from cluster_health import tasks

    driver.run(tasks.start_sweep, sweep.pk)
    sweep.refresh_from_db()
    assert sweep.status == "failed" and "refused row" in sweep.error


@pytest.mark.django_db(transaction=True)  # commits for real: the round's send runs as advance() commits
def test_a_broker_away_while_a_round_is_sent_leaves_the_sweep_to_the_reaper(driver, settings):
    """A failed publish (Redis restarting) is no reason to fail the sweep: its probes time out and it goes on."""
    from cluster_health.sweeps import lifecycle

    for name in ("n0", "n1", "n2", "n3"):
        heartbeat(name)
    sweep = driver.sweep(kind="connectivity", sizes=[1024])
    PairProbe.objects.filter(sweep=sweep, round=1).update(status="ok")  # round 1 done: the next one is sent

    settings.REDIS_URL = "redis://127.0.0.1:1/0"  # nothing listens there: the publish meets a broker away
    assert lifecycle.advance_or_fail(sweep.pk) is False
    sweep.refresh_from_db()
    assert (sweep.status, sweep.error, sweep.current_round) == ("running", "", 2)
    # Committed running and left unsent: the reaper's outbox sends them again (sweeps/outbox.py).
    second = PairProbe.objects.filter(sweep=sweep, round=2)
    assert second.exists() and set(second.values_list("status", "sent_at")) == {("running", None)}


@pytest.mark.parametrize(
    "request_fields, field",
    [
        ({"timeouts": {"connect": 250, "store": 250, "init": 250, "collective": 250}}, "timeouts"),
        ({"kind": "discover", "timeouts": {"store": 300, "connect": 300, "collective": 300}}, "timeouts"),
        ({"baseline": "sweep:²"}, "baseline"),
        ({"baseline": "sweep:1²"}, "baseline"),
    ],
)
def test_requests_that_would_fail_at_dispatch_are_refused_up_front(request_fields, field):
    with pytest.raises(SweepRequestError, match=field):
        clean_request(**{"kind": "connectivity", **request_fields})
    assert Sweep.objects.count() == 0
