"""Batch ingest: many halves in one call keep every guarantee of one half at a time."""

import pytest

from cluster_health import ingest
from cluster_health.models import PairProbe, RejectedMessage, Sweep
from devtools.sweep_driver import heartbeat, result_for
from tests.support.sweep_setup import connectivity_sweep

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("memory_channel_layer")]


def ingest_batch(driver, results):
    return driver.run(ingest.ingest_results, results)


@pytest.fixture
def four_nodes(driver):
    return connectivity_sweep(driver)


def test_it_applies_both_halves_of_every_pair_in_one_batch_and_advances_the_round(driver, four_nodes):
    sweep, cmds = four_nodes
    assert len(cmds) == 4
    outcomes = ingest_batch(driver, [result_for(c, busbw=3.0) for c in cmds])
    assert outcomes == ["applied", "final", "applied", "final"]
    done = PairProbe.objects.filter(sweep=sweep, round=1)
    assert {p.status for p in done} == {"ok"} and {p.busbw_gbps for p in done} == {3.0}
    assert Sweep.objects.get(pk=sweep.pk).current_round == 2
    assert len(driver.take()) == 4  # round 2 dispatched once


def test_it_keeps_the_first_of_a_half_repeated_in_one_batch(driver, four_nodes):
    sweep, cmds = four_nodes
    a, b = cmds[0], cmds[1]
    outcomes = ingest_batch(driver, [result_for(a, busbw=3.0), result_for(a, busbw=99.0), result_for(b, busbw=3.0)])
    assert outcomes == ["applied", "duplicate", "final"]
    probe = PairProbe.objects.get(pk=a["probe_id"])
    assert probe.half_a["busbw_gbps"] == 3.0 and probe.busbw_gbps == 3.0


def test_it_changes_nothing_when_a_batch_is_delivered_twice(driver, four_nodes):
    sweep, cmds = four_nodes
    batch = [result_for(c) for c in cmds[:2]] + [result_for(cmds[2])]
    assert ingest_batch(driver, batch) == ["applied", "final", "applied"]
    before = list(PairProbe.objects.filter(sweep=sweep).order_by("id").values())
    assert ingest_batch(driver, batch) == ["late", "late", "duplicate"]
    assert list(PairProbe.objects.filter(sweep=sweep).order_by("id").values()) == before
    assert RejectedMessage.objects.count() == 0


def test_it_rejects_bad_halves_of_a_batch_and_applies_the_rest(driver, four_nodes):
    sweep, cmds = four_nodes
    malformed = result_for(cmds[0])
    malformed["status"] = "splendid"
    batch = [
        malformed,
        result_for(cmds[0], node="intruder"),
        result_for(cmds[1], sweep_id=sweep.pk + 1),
        result_for(cmds[0], rank=1),
        result_for(cmds[0]),
        result_for(cmds[1]),
    ]
    assert ingest_batch(driver, batch) == ["rejected"] * 4 + ["applied", "final"]
    assert RejectedMessage.objects.count() == 4
    assert PairProbe.objects.get(pk=cmds[0]["probe_id"]).status == "ok"


def test_it_finishes_a_sweep_fed_only_in_batches_with_the_same_verdict(driver, four_nodes):
    sweep, cmds = four_nodes
    while cmds:
        ingest_batch(
            driver,
            [
                result_for(c)
                if c["node"] != "n3"
                else result_for(c, status="failed", stage="connect", reason="refused")
                for c in cmds
            ],
        )
        cmds = driver.take()
    sweep.refresh_from_db()
    assert sweep.status == "finished" and sweep.verdict == "fail"
    assert PairProbe.objects.filter(sweep=sweep, status="failed").count() == 3
    assert PairProbe.objects.filter(sweep=sweep, status="ok").count() == 3


def test_a_database_that_drops_out_mid_batch_rejects_no_valid_half(driver, monkeypatch):
    """A failover during the batch (and during its one-at-a-time retry) is the database's trouble: the
    halves are not kept as rejected, the caller applies the batch again, and then they count."""
    from django.db import OperationalError

    from cluster_health.ingest import results

    for n in ("n0", "n1", "n2", "n3"):
        heartbeat(n)
    driver.sweep(kind="connectivity")
    halves = [result_for(c) for c in driver.take()]
    real = results._ingest_pairs

    def gone(batch):
        raise OperationalError("server closed the connection unexpectedly")

    monkeypatch.setattr(results, "_ingest_pairs", gone)
    with pytest.raises(OperationalError):
        driver.run(results.ingest_results, halves)
    assert not RejectedMessage.objects.exists()
    monkeypatch.setattr(results, "_ingest_pairs", real)
    assert driver.run(results.ingest_results, halves).count("final") == 2
