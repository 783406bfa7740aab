"""The confirmation pass inside a sweep: planned after its rounds, shown as ``confirming``, folded into its pairs."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from cluster_health.actions import slurm
from cluster_health.models import PairProbe, Sweep
from cluster_health.shapes import documents
from devtools.sweep_driver import heartbeat, result_for

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("memory_channel_layer")]
NODES = [f"n{i}" for i in range(1, 7)]


def fleet():
    for n in NODES:
        heartbeat(n)


def names(cmd):
    """The two nodes of a pair probe's command, and its round (a group collective's command: nobody, None)."""
    if cmd["kind"] != "pair":
        return set(), None
    probe = PairProbe.objects.select_related("node_a", "node_b").get(pk=cmd["probe_id"])
    return {probe.node_a.name, probe.node_b.name}, probe.round


def drive(driver, sweep, reply):
    """Answer every command; returns the sweep's phase seen at each round it was in."""
    phases = {}
    for _ in range(100):
        pending = driver.take()
        if not pending:
            break
        sweep.refresh_from_db()
        phases[sweep.current_round] = documents.sweep_json(sweep, with_pairs=False)["phase"]
        for cmd in pending:
            driver.ingest(reply(cmd))
    sweep.refresh_from_db()
    return phases


def test_a_clean_sweep_has_no_confirmation_rounds(driver):
    fleet()
    sweep = driver.sweep(kind="pairs", nodes=NODES, pairs=[[a, b] for a in NODES for b in NODES if a < b])
    planned = Sweep.objects.get(pk=sweep.pk).total_rounds
    phases = drive(driver, sweep, lambda cmd: result_for(cmd, busbw=1.0 + cmd["probe_id"] % 3 / 50))
    assert (sweep.status, sweep.verdict) == ("finished", "pass")
    assert sweep.total_rounds == planned and sweep.params["confirm_rounds"] == 0
    assert sweep.params["confirm_first"] is None and set(phases.values()) == {"probing"}
    assert documents.sweep_json(sweep)["confirmation"] == {"first_round": None, "rounds": 0}


def test_a_node_ten_times_slower_on_a_first_hand_run_sweep_has_its_cells_degraded_and_is_named(driver):
    fleet()
    sweep = driver.sweep(kind="full", nodes=NODES)
    assert sweep.baseline_id is None  # a new deployment: no history to judge against

    def reply(cmd):
        pair, _ = names(cmd)
        return result_for(cmd, busbw=0.1 if "n3" in pair else 1.0 + cmd["probe_id"] % 3 / 50)

    phases = drive(driver, sweep, reply)
    assert "confirming" in phases.values()
    report = documents.sweep_json(sweep)
    slow = [p for p in report["pairs"] if "n3" in (p["a"], p["b"])]
    assert len(slow) == 5 and {(p["status"], p["reason"]) for p in slow} == {("degraded", "below_peers")}
    for p in slow:  # the figures, and what they were compared with
        assert "busbw 0.1 GB/s" in p["hint"] and "links without it" in p["hint"]
        assert p["evidence"]["peers"]["subject"] == "n3"
    confirmed = [p for p in slow if p["evidence"]["confirmation"]]
    assert confirmed and all(p["evidence"]["confirmation"]["outcome"] == "confirmed" for p in confirmed)
    assert {p["status"] for p in report["pairs"] if "n3" not in (p["a"], p["b"])} == {"ok"}
    named = [f for f in report["findings"] if f["code"] == "slow_node"]
    assert [(f["severity"], f["subject"]) for f in named] == [("fail", "n3")]  # slow again when probed again
    assert report["verdict"] == "fail"
    assert len(report["pairs"]) == 15  # the pass's own probes are folded into the pairs they confirm


def test_a_pair_bad_once_and_fine_again_is_transient_and_blames_nobody(driver):
    fleet()
    sweep = driver.sweep(kind="full", nodes=NODES)

    def reply(cmd):
        pair, rnd = names(cmd)
        first = Sweep.objects.get(pk=cmd["sweep_id"]).params.get("confirm_first")
        if pair == {"n2", "n5"} and first is None:
            return result_for(cmd, status="timeout", stage="connect", reason="connect_timeout", hint="no answer")
        return result_for(cmd, busbw=1.0)

    phases = drive(driver, sweep, reply)
    assert "confirming" in phases.values()
    report = documents.sweep_json(sweep)
    [p] = [p for p in report["pairs"] if {p["a"], p["b"]} == {"n2", "n5"}]
    assert p["status"] == "transient" and p["reason"] == "connect_timeout"
    record = p["evidence"]["confirmation"]
    assert record["first"]["status"] == "timeout" and record["again"]["status"] == "ok"
    assert "transient, not acted on" in p["hint"]
    assert report["verdict"] == "pass"
    assert [f["code"] for f in report["findings"] if f["severity"] != "info"] == []
    assert [f["code"] for f in report["findings"]] == ["transient"]
    assert slurm.blamed_nodes(sweep) == {}
    # Named as a baseline, the sweep gives the pair what its second look measured.
    from cluster_health.models import BaselinePair
    from cluster_health.sweeps import baselines

    named = baselines.baseline_from_sweep(sweep)
    assert BaselinePair.objects.get(baseline=named, node_a="n2", node_b="n5").busbw_gbps == pytest.approx(1.0)


def test_a_node_transient_every_night_is_named_flapping_and_still_drained_by_nobody(driver):
    fleet()
    for partner in ("n1", "n2", "n5", "n6", "n1", "n2"):
        sweep = driver.sweep(kind="pairs", nodes=NODES, pairs=[[a, b] for a in NODES for b in NODES if a < b])

        def reply(cmd, partner=partner):
            pair, _ = names(cmd)
            first = Sweep.objects.get(pk=cmd["sweep_id"]).params.get("confirm_first")
            if pair == {"n3", partner} and first is None:
                return result_for(cmd, status="failed", stage="init", reason="transport", hint="reset")
            return result_for(cmd, busbw=1.0)

        drive(driver, sweep, reply)
    report = documents.sweep_json(sweep)
    assert [(f["severity"], f["subject"]) for f in report["findings"] if f["code"] == "flapping"] == [("warn", "n3")]
    assert report["verdict"] == "warn" and slurm.blamed_nodes(sweep) == {}
    assert "transient in 6 of the last 6 sweeps" in next(
        f["text"] for f in report["findings"] if f["code"] == "flapping"
    )


def test_a_hand_run_sweep_teaches_the_rolling_baseline_of_sweeps_measured_the_same_way(driver):
    fleet()
    first = driver.sweep(kind="full", nodes=NODES)  # by hand: source "command"
    drive(driver, first, lambda cmd: result_for(cmd, busbw=1.0))
    assert (first.source, first.verdict) == ("command", "pass")
    same = driver.sweep(kind="full", nodes=NODES)
    same.refresh_from_db()
    assert same.baseline is not None and same.baseline.sweeps_used == [first.pk]
    drive(driver, same, lambda cmd: result_for(cmd, busbw=1.0))
    other_sizes = driver.sweep(kind="full", nodes=NODES, sizes=[1 << 20])
    other_sizes.refresh_from_db()
    assert other_sizes.baseline is None  # measured at other sizes: not comparable


def test_a_sweep_cancelled_during_the_pass_keeps_each_pair_once_as_first_seen(driver):
    from cluster_health import sweeps

    fleet()
    sweep = driver.sweep(kind="pairs", nodes=NODES, pairs=[["n1", "n2"], ["n3", "n4"]])
    for cmd in driver.take():
        pair, _ = names(cmd)
        failing = pair == {"n1", "n2"}
        driver.ingest(result_for(cmd, status="failed", reason="refused") if failing else result_for(cmd))
    sweep.refresh_from_db()
    assert sweep.phase == "confirming" and driver.take()
    assert driver.run(sweeps.cancel, sweep.pk)
    rows = sorted(PairProbe.objects.filter(sweep=sweep).values_list("node_a__name", "node_b__name", "status"))
    assert rows == [("n1", "n2", "failed"), ("n3", "n4", "ok")]


def test_with_the_pass_off_nothing_is_probed_again_and_nothing_is_confirmed_to_act_on(driver, settings):
    """CLUSTER_HEALTH_CONFIRMATION=off, for comparison only: the planned rounds and the peer judgement stay,
    no pair is probed again, so a dead link and a slow node are reported unconfirmed and drain nothing."""
    settings.CONFIRMATION = "off"
    fleet()
    sweep = driver.sweep(kind="full", nodes=NODES)
    planned = Sweep.objects.get(pk=sweep.pk).total_rounds

    def reply(cmd):
        pair, _ = names(cmd)
        if pair == {"n2", "n5"}:
            return result_for(cmd, status="timeout", stage="connect", reason="connect_timeout", hint="no answer")
        return result_for(cmd, busbw=0.1 if "n3" in pair else 1.0 + cmd["probe_id"] % 3 / 50)

    phases = drive(driver, sweep, reply)
    assert set(phases.values()) == {"probing"} and sweep.total_rounds == planned
    assert documents.sweep_json(sweep)["confirmation"] == {"first_round": None, "rounds": 0}
    report = documents.sweep_json(sweep)
    assert {p["status"] for p in report["pairs"] if "n3" in (p["a"], p["b"])} == {"degraded"}
    assert not any(p["evidence"].get("confirmation") for p in report["pairs"] if p["evidence"])
    assert ("warn", "slow_node", "n3") in [(f["severity"], f["code"], f["subject"]) for f in report["findings"]]
    assert ("fail", "link_failed", "n2<->n5") in [(f["severity"], f["code"], f["subject"]) for f in report["findings"]]
    assert slurm.blamed_nodes(sweep) == {}


def test_the_pass_waits_its_settle_time_before_it_looks_again(driver, monkeypatch):
    """``confirm_after_s``: the planned rounds end, the pass is planned (the sweep is confirming) and nothing is
    probed again until the wait has run out; the reaper's tick after it sends the pass's first round."""
    from cluster_health.sweeps import confirming

    fleet()
    sweep = driver.sweep(kind="pairs", nodes=NODES, pairs=[["n1", "n2"], ["n3", "n4"]], confirm_after_s=30)
    for cmd in driver.take():
        pair, _ = names(cmd)
        failing = pair == {"n1", "n2"}
        driver.ingest(result_for(cmd, status="failed", reason="refused") if failing else result_for(cmd))
    sweep.refresh_from_db()
    assert sweep.phase == "confirming" and sweep.current_round == sweep.params["confirm_first"] - 1
    assert documents.sweep_json(sweep)["confirmation"]["after_s"] == 30
    driver.reap()
    assert not driver.take(), "probed again before the wait ran out"
    real = confirming.time.time
    monkeypatch.setattr(confirming, "time", SimpleNamespace(time=lambda: real() + 31))
    driver.reap()
    again = [names(cmd) for cmd in driver.take()]
    assert again and all(r == sweep.params["confirm_first"] for _, r in again), again
    assert {"n1", "n2"} & set().union(*(pair for pair, _ in again))


def test_a_wait_before_the_pass_is_bounded_and_a_number(driver):
    from cluster_health.sweeps.request import SweepRequestError, clean_request

    assert clean_request(kind="full", confirm_after_s=2.5)["params"]["confirm_after_s"] == 2.5
    for bad in (-1, 601, "5", True, float("nan")):
        with pytest.raises(SweepRequestError, match="confirm_after_s"):
            clean_request(kind="full", confirm_after_s=bad)
