"""Ingest: duplicates and late results change nothing, bad messages are kept and rejected, halves merge."""

import pytest

from cluster_health.core import merge
from cluster_health.models import PairProbe, RejectedMessage
from devtools.sweep_driver import heartbeat, result_for

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("memory_channel_layer")]


@pytest.fixture
def pair(driver):
    heartbeat("n0")
    heartbeat("n1")
    sweep = driver.sweep(kind="pairs", pairs=[["n0", "n1"]], sizes=[1024])
    a, b = sorted(driver.take(), key=lambda c: c["rank"])
    return sweep, a, b


def test_it_ignores_a_duplicate_half(driver, pair):
    sweep, a, b = pair
    assert driver.ingest(result_for(a, busbw=3.0)) == "applied"
    assert driver.ingest(result_for(a, busbw=99.0)) == "duplicate"
    assert PairProbe.objects.get(sweep=sweep).half_a["busbw_gbps"] == 3.0
    assert driver.ingest(result_for(b, busbw=3.0)) == "final"
    assert driver.ingest(result_for(b, busbw=1.0)) == "late"
    probe = PairProbe.objects.get(sweep=sweep)
    assert probe.status == "ok" and probe.busbw_gbps == 3.0
    assert RejectedMessage.objects.count() == 0


def test_it_rejects_a_malformed_result_and_loses_nothing(driver, pair):
    sweep, a, b = pair
    bad = result_for(a)
    bad["status"] = "splendid"
    assert driver.ingest(bad) == "rejected"
    assert driver.ingest("not even an object") == "rejected"
    assert driver.ingest(result_for(a, latency=-5.0)) == "rejected"  # out of range
    assert driver.ingest(result_for(a, busbw=float("nan"))) == "rejected"
    rejected = list(RejectedMessage.objects.order_by("id"))
    assert len(rejected) == 4
    assert "status" in rejected[0].error and rejected[0].payload["status"] == "splendid"
    assert PairProbe.objects.get(sweep=sweep).status == "running"
    driver.ingest(result_for(a))
    driver.ingest(result_for(b))
    sweep.refresh_from_db()
    assert sweep.verdict == "pass"


def test_it_rejects_unknown_nodes_wrong_sweeps_and_wrong_ranks(driver, pair):
    sweep, a, b = pair
    assert driver.ingest(result_for(a, node="intruder")) == "rejected"
    assert driver.ingest(result_for(a, sweep_id=sweep.pk + 1)) == "rejected"
    assert driver.ingest(result_for(a, rank=1)) == "rejected"
    assert driver.ingest(result_for(a, probe_id=10**9)) == "rejected"
    assert RejectedMessage.objects.count() == 4
    assert PairProbe.objects.get(sweep=sweep).half_a is None


def test_a_half_for_a_probe_of_a_later_round_is_rejected_until_it_is_sent(driver):
    """No node has a later round's command yet: a half for one is forged (or a replay of another sweep's)."""
    for n in ("n0", "n1", "n2", "n3"):
        heartbeat(n)
    sweep = driver.sweep(kind="connectivity")
    sent = driver.take()
    later = PairProbe.objects.filter(sweep=sweep, status="pending").order_by("round", "pk").first()
    assert later is not None and later.round > 1
    forged = {
        **result_for({**sent[0], "probe_id": later.pk, "node": later.node_a.name, "rank": 0}),
        "status": "failed",
        "stage": "connect",
        "reason": "refused",
        "hint": "forged",
    }
    assert driver.ingest(forged) == "rejected"
    assert "was not sent yet" in RejectedMessage.objects.get().error
    later.refresh_from_db()
    assert (later.status, later.half_a) == ("pending", None)


def test_it_keeps_the_worse_half():
    ok = {"status": "ok", "stage": "bandwidth", "busbw_gbps": 5.0, "latency_us_p50": 10.0}
    slow = {"status": "ok", "stage": "bandwidth", "busbw_gbps": 2.0, "latency_us_p50": 30.0}
    failed = {"status": "failed", "stage": "init", "reason": "transport", "hint": "eth9 missing"}
    early = {"status": "failed", "stage": "connect", "reason": "refused"}
    assert merge.merge_halves(ok, slow)["busbw_gbps"] == 2.0
    assert merge.merge_halves(ok, slow)["latency_us_p50"] == 30.0
    m = merge.merge_halves(ok, failed)
    assert (m["status"], m["stage"], m["reason"], m["busbw_gbps"]) == ("failed", "init", "transport", None)
    assert merge.merge_halves(failed, early)["stage"] == "connect"
    # The master timed out waiting in its store because its peer could not reach it: the peer's view is the cause.
    waited = {"status": "timeout", "stage": "store", "reason": "store_timeout", "hint": "peer never arrived"}
    unreachable = {"status": "failed", "stage": "connect", "reason": "unreachable", "hint": "no route to 10.9.9.9"}
    m = merge.merge_halves(waited, unreachable)
    assert (m["status"], m["stage"], m["reason"]) == ("failed", "connect", "unreachable")


def test_it_closes_a_silent_half_with_the_other_halfs_stage_and_reason():
    arrived = {"status": "failed", "stage": "store", "reason": "store_timeout", "hint": "no store"}
    m = merge.close_unanswered(arrived, None, ("a", "b"), offline=(False, False))
    assert (m["status"], m["stage"], m["reason"]) == ("timeout", "store", "store_timeout")
    m = merge.close_unanswered(None, None, ("a", "b"), offline=(False, True))
    assert (m["status"], m["reason"]) == ("offline", "agent_offline") and "b" in m["hint"]
    m = merge.close_unanswered({"status": "ok", "stage": "bandwidth"}, None, ("a", "b"), offline=(False, False))
    assert (m["status"], m["reason"]) == ("timeout", "probe_crashed")


def test_it_registers_nodes_from_heartbeats_and_rejects_bad_ones():
    assert heartbeat("fresh", address="10.0.0.7", facts={"versions": {"torch": "2.4"}}) == "applied"
    from cluster_health.models import Node

    node = Node.objects.get(name="fresh")
    assert node.address == "10.0.0.7" and node.is_online()
    from cluster_health import ingest

    assert ingest.record_heartbeat({"v": 1, "node": "bad name!", "address": "x"}) == "rejected"
