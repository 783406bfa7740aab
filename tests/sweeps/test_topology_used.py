"""Inferred topology used: where no label is declared, the groups the latest full sweep measured plan the topology
and sampled sweeps and sum up the group view; a topology sweep's uplink rounds give each group's uplink figure."""

from __future__ import annotations

import json

import pytest
from django.contrib.auth.models import User
from django.core.management import call_command

from cluster_health.models import PairProbe
from cluster_health.nodes import declare_topology, groups_of
from cluster_health.sweeps import baselines
from devtools.sweep_driver import result_for
from tests.support.racked_sweep import CABLED, NODES, racked_sweep

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("memory_channel_layer")]

MEASURED = [["gpu01", "gpu02"], ["gpu03", "gpu04", "gpu05", "gpu06"]]  # as CABLED
UPLINK_PAIR = 0.6  # GB/s each pair of an uplink round measures (inside pairs: 9.6, a pair across alone: 2.4)


def unlabelled_after_a_full_sweep(driver, tmp_path):
    full = racked_sweep(driver, tmp_path)
    declare_topology({})  # every label cleared: only the measurements are left
    return full


def cabled_answer(uplink_rounds: dict[str, str]):
    def answer(cmd):
        if cmd["kind"] != "pair":
            return result_for(cmd)
        probe = PairProbe.objects.select_related("node_a", "node_b").get(pk=cmd["probe_id"])
        if str(probe.round) in uplink_rounds:
            return result_for(cmd, latency=60.0, busbw=UPLINK_PAIR)
        inside = CABLED[probe.node_a.name] == CABLED[probe.node_b.name]
        return result_for(cmd, latency=12.0 if inside else 41.0, busbw=9.6 if inside else 2.4)

    return answer


def test_with_no_label_a_topology_sweep_plans_with_the_measured_groups_and_measures_their_uplinks(
    driver, tmp_path, capsys, client
):
    unlabelled_after_a_full_sweep(driver, tmp_path)
    assert groups_of(NODES) == {n: ("group-1" if n in MEASURED[0] else "group-2") for n in NODES}
    sweep = driver.sweep(kind="topology")
    sweep.refresh_from_db()
    assert sorted(sweep.params["groups"].values()) == MEASURED  # not the hostname pattern's one group "gpu"
    uplink_rounds = sweep.params["uplink_rounds"]
    assert sorted(uplink_rounds.values()) == ["group-1", "group-2"]
    driver.answer_all(cabled_answer(uplink_rounds))
    sweep.refresh_from_db()
    assert sweep.status == "finished", sweep.error
    for k, group in uplink_rounds.items():  # each: several of the group's nodes, each with a node outside, at once
        pairs = PairProbe.objects.filter(sweep=sweep, round=int(k)).values_list("node_a__name", "node_b__name")
        assert all(CABLED[a] != CABLED[b] for a, b in pairs)
        assert len(pairs) >= 2, (group, pairs)

    capsys.readouterr()
    call_command("topology", "infer", "--json")
    report = json.loads(capsys.readouterr().out)
    assert report["uplinks_sweep"] == sweep.pk
    by_group = {u["group"]: u for u in report["uplinks"]}
    assert set(by_group) == {"group-1", "group-2"}
    one = by_group["group-1"]  # gpu01 and gpu02 both send across at once
    assert (one["nodes"], one["senders"], one["pairs"]) == (2, 2, 2)
    assert one["gbps"] == pytest.approx(2 * UPLINK_PAIR) and one["mbit"] == pytest.approx(9600.0)
    assert one["inside_gbps"] == pytest.approx(9.6) and one["oversubscription"] == pytest.approx(16.0)
    call_command("topology", "infer")
    assert "group-1: 1.2 GB/s with 2 of its nodes sending at once, oversubscription 16:1" in capsys.readouterr().out

    client.force_login(User.objects.create_user("viewer", password="pw-viewer-123"))
    page = client.get("/topology/").content.decode()
    assert 'id="topology-uplinks"' in page and 'data-uplink="group-1"' in page and "16.0:1" in page

    grouped = client.get(f"/api/sweeps/{sweep.pk}/groups").json()  # the grouping it planned with
    assert grouped["groups"] == ["group-1", "group-2"] and grouped["sizes"] == [2, 4]
    assert grouped["origin"] == ("Grouped as planned, each node by the latest full sweep's measurements (6 nodes).")
    declare_topology({"gpu01": "rack-a"})  # labelled later: the view still says how the sweep was planned
    assert client.get(f"/api/sweeps/{sweep.pk}/groups").json()["origin"] == grouped["origin"]


def test_with_no_label_the_group_view_of_a_full_sweep_sums_up_by_the_measured_groups(driver, tmp_path, client):
    unlabelled_after_a_full_sweep(driver, tmp_path)
    later = driver.sweep(kind="full")
    driver.answer_all(cabled_answer({}))
    client.force_login(User.objects.create_user("viewer", password="pw-viewer-123"))
    grouped = client.get(f"/api/sweeps/{later.pk}/groups").json()
    assert grouped["groups"] == ["group-1", "group-2"] and grouped["sizes"] == [2, 4]
    assert "the latest full sweep's measurements (6 nodes)" in grouped["origin"]


def test_with_no_label_a_sampled_sweep_draws_its_rounds_inside_and_across_the_measured_groups(driver, tmp_path):
    unlabelled_after_a_full_sweep(driver, tmp_path)
    sweep = driver.sweep(kind="sampled", rounds=4, seed=5)
    sweep.refresh_from_db()
    pairs = PairProbe.objects.filter(sweep=sweep).values_list("round", "node_a__name", "node_b__name")
    kinds: dict[int, set[bool]] = {}
    for k, a, b in pairs:
        kinds.setdefault(k, set()).add(CABLED[a] == CABLED[b])
    assert sorted(tuple(v) for v in kinds.values()) == [(False,), (False,), (True,), (True,)]


def test_declared_labels_and_an_operator_s_hostname_pattern_win_over_the_measurements(driver, tmp_path, settings):
    unlabelled_after_a_full_sweep(driver, tmp_path)
    declare_topology({"gpu01": "rack-z"})
    placed = groups_of(NODES)
    assert placed["gpu01"] == "rack-z" and placed["gpu02"] == "group-1" and placed["gpu06"] == "group-2"
    settings.GROUP_PATTERN = r"^(gpu0[1-3])$|^(gpu0[4-6])$"  # an operator's rule: measurements no longer asked
    placed = groups_of(NODES)
    assert placed["gpu01"] == "rack-z" and placed["gpu02"] == "gpu02" and placed["gpu05"] == "gpu05"


def test_a_full_sweep_that_shows_no_structure_leaves_the_hostname_pattern_in_place(driver):
    from devtools.sweep_driver import heartbeat

    names = ["rack1-a", "rack1-b", "rack2-a", "rack2-b", "rack3-a"]
    for n in names:
        heartbeat(n)
    driver.sweep(kind="full")
    driver.answer_all()  # every pair alike: one group
    assert groups_of(names) == {n: n.split("-")[0] for n in names}


def test_an_uplink_round_s_pairs_are_shares_of_the_uplink_never_judged_slow_nor_a_baseline(driver, tmp_path):
    """Each pair of an uplink round carries a share of its group's uplink (0.6 GB/s where the same pair alone moves
    2.4): held against a rolling baseline of earlier topology sweeps, or against its peers, that would read slow on
    every healthy cluster. It is kept as the uplink's share (evidence ``uplink``), out of every baseline and trend."""
    unlabelled_after_a_full_sweep(driver, tmp_path)
    for _ in range(3):  # the rolling baseline: three clean topology sweeps
        sweep = driver.sweep(kind="topology")
        sweep.refresh_from_db()
        driver.answer_all(cabled_answer(sweep.params["uplink_rounds"]))
        sweep.refresh_from_db()
        assert (sweep.status, sweep.verdict) == ("finished", "pass"), list(sweep.findings.values("code", "text"))
    base = baselines.rolling_baseline()
    across = {(r.node_a, r.node_b): r.busbw_gbps for r in base.pairs.all() if CABLED[r.node_a] != CABLED[r.node_b]}
    assert across and all(v == pytest.approx(2.4, rel=0.05) for v in across.values())  # alone, never a share

    sweep = driver.sweep(kind="topology", baseline="rolling")
    sweep.refresh_from_db()
    uplink_rounds = sweep.params["uplink_rounds"]
    driver.answer_all(cabled_answer(uplink_rounds))
    sweep.refresh_from_db()
    assert (sweep.status, sweep.verdict) == ("finished", "pass"), (
        sweep.error,
        list(sweep.findings.values("code", "text")),
    )
    shares = PairProbe.objects.filter(sweep=sweep, round__in=[int(k) for k in uplink_rounds])
    assert shares and all(p.status == "ok" and p.busbw_gbps == pytest.approx(UPLINK_PAIR, rel=0.05) for p in shares)
    assert {p.evidence["uplink"] for p in shares} == set(uplink_rounds.values())
    assert all("expected" not in p.evidence for p in shares)
    assert not baselines.baseline_from_sweep(sweep).pairs.filter(busbw_gbps__lt=1.0).exists()


def test_with_no_label_a_topology_sweep_s_pair_across_two_measured_groups_is_not_slow_next_to_the_racks(
    driver, tmp_path
):
    """Besides its uplink rounds a topology sweep probes a pair across each two groups, alone: it runs at the path's
    2.4 GB/s, a quarter of the 9.6 inside a group. Held against the sweep's median (the links inside) it read as a
    slow link on every healthy night; it has no peer of its kind, and baselines judge it once they exist."""
    unlabelled_after_a_full_sweep(driver, tmp_path)
    sweep = driver.sweep(kind="topology")
    sweep.refresh_from_db()
    uplink_rounds = sweep.params["uplink_rounds"]
    driver.answer_all(cabled_answer(uplink_rounds))
    sweep.refresh_from_db()
    alone = PairProbe.objects.filter(sweep=sweep).exclude(round__in=[int(k) for k in uplink_rounds])
    across = [p for p in alone.select_related("node_a", "node_b") if CABLED[p.node_a.name] != CABLED[p.node_b.name]]
    assert across, "the plan probes a pair across the two groups outside the uplink rounds"
    assert all(p.status == "ok" and p.busbw_gbps == pytest.approx(2.4) for p in across), [
        (p.status, p.hint) for p in across
    ]
    assert (sweep.status, sweep.verdict) == ("finished", "pass"), list(sweep.findings.values("code", "text"))
