"""A node's health after the last pair sweeps: its result, failing and slow peers, findings, since when."""

from datetime import timedelta

import pytest
from django.utils import timezone

from cluster_health.models import Baseline, BaselinePair, Node, Sweep
from cluster_health.shapes import health
from tests.support.dashboard_rows import make_nodes, make_sweep

pytestmark = pytest.mark.django_db

OFFLINE = {"status": "offline", "stage": "resolve", "reason": "agent_offline", "busbw_gbps": None}
TIMEOUT = {"status": "timeout", "stage": "connect", "reason": "connect_timeout", "busbw_gbps": None}
SLOW = {"status": "degraded", "reason": "below_baseline", "busbw_gbps": 0.024}


def offline_node(name, names):
    return {tuple(sorted((name, other), key=lambda n: names.index(n))): OFFLINE for other in names if other != name}


def test_it_gives_an_offline_nodes_pairs_to_that_node():
    names = ["h1", "h2", "h3", "h4"]
    nodes = make_nodes(names)
    make_sweep(nodes, {**offline_node("h4", names), ("h1", "h2"): TIMEOUT, ("h2", "h3"): SLOW}, verdict="fail")
    found = health.fleet_health(nodes)
    assert found["h4"].result == "offline" and found["h4"].state == "failing"
    assert found["h3"].result == "degraded" and found["h3"].offline_peers == ["h4"]
    assert found["h3"].failing_peers == [] and found["h3"].slow_peers == ["h2"]
    assert found["h1"].result == "timeout" and found["h1"].failing_peers == [("h2", "timeout")]
    assert found["h2"].failing_peers == [("h1", "timeout")] and found["h2"].slow_peers == ["h3"]


def test_a_node_found_slow_owns_its_slow_pairs(django_assert_max_num_queries):
    nodes = make_nodes(["h1", "h2", "h3", "h4"])
    slow = {("h1", "h3"): SLOW, ("h2", "h3"): SLOW, ("h3", "h4"): SLOW}
    sweep = make_sweep(nodes, slow, verdict="warn", findings=[("warn", "h3", "h3 is slow")])
    sweep.findings.update(code="slow_node")
    with django_assert_max_num_queries(8):  # the six, and the slow node's finding and pairs
        found = health.fleet_health(nodes)
    assert found["h3"].result == "degraded" and found["h3"].slow_peers == ["h1", "h2", "h4"]
    for peer in ("h1", "h2", "h4"):  # their one slow pair is h3's: not held against them
        assert found[peer].state == "ok" and found[peer].slow_peers == [] and found[peer].slow_node_peers == ["h3"]


def test_a_slow_pair_without_a_slow_node_counts_against_both_sides():
    nodes = make_nodes(["h1", "h2", "h3"])
    make_sweep(nodes, {("h1", "h2"): SLOW}, verdict="warn", findings=[("warn", "h1<->h2", "slow link")])
    found = health.fleet_health(nodes)
    assert found["h1"].result == "degraded" and found["h1"].slow_peers == ["h2"]
    assert found["h2"].result == "degraded" and found["h2"].slow_peers == ["h1"]


def test_it_says_since_which_sweep_a_node_fails():
    nodes = make_nodes(["a", "b", "c"])
    make_sweep(nodes, {("a", "b"): TIMEOUT})
    make_sweep(nodes)  # all ok: the run of failures starts after it
    second = make_sweep(nodes, {("a", "b"): TIMEOUT})
    third = make_sweep(nodes, {("a", "c"): TIMEOUT})
    found = health.fleet_health(nodes)
    assert found["a"].sweep_id == third.pk and found["a"].since_sweep == second.pk
    assert found["b"].result == "ok" and found["b"].since_sweep is None
    assert found["c"].since_sweep == third.pk


def test_it_names_the_findings_of_the_nodes_last_sweep_that_name_it():
    nodes = make_nodes(["n1", "n2", "n10"])
    make_sweep(nodes, findings=[("fail", "n1", "old news")])
    make_sweep(
        nodes,
        {("n1", "n2"): TIMEOUT},
        verdict="fail",
        findings=[("fail", "n1<->n2", "a firewall"), ("warn", "n10", "n10 is slow"), ("info", "n1, n10", "both")],
    )
    found = health.fleet_health(nodes)
    assert [f.text for f in found["n1"].findings] == ["a firewall", "both"]
    assert [f.text for f in found["n10"].findings] == ["n10 is slow", "both"]  # "n1" is not "n10"


def test_a_node_in_no_pair_sweep_is_untested_and_open_sweeps_do_not_count():
    nodes = make_nodes(["x", "y"])
    make_sweep(nodes, {("x", "y"): TIMEOUT}, status="running")
    make_sweep(nodes, {("x", "y"): TIMEOUT}, kind="group")
    assert health.fleet_health(nodes)["x"].state == "untested"


def test_a_collapsed_sweep_that_kept_no_row_of_a_node_counts_it_ok():
    nodes = make_nodes(["p", "q"])
    sweep = make_sweep(nodes)
    sweep.pairs.all().delete()
    found = health.fleet_health(nodes)
    assert found["p"].sweep_id == sweep.pk and found["p"].result == "ok"


def test_peer_bandwidth_has_a_row_per_peer_with_its_baseline():
    nodes = make_nodes(["b1", "b2", "b3"])
    base = Baseline.objects.create(name="nightly", source="rolling")
    BaselinePair.objects.create(baseline=base, node_a="b1", node_b="b2", busbw_gbps=2.1)
    sweep = make_sweep(nodes, {("b1", "b3"): SLOW}, baseline=base)
    rows = health.peer_bandwidth(Node.objects.get(name="b1"), Sweep.objects.get(pk=sweep.pk))
    assert [(r["peer"], r["status"], r["busbw_gbps"], r["baseline_gbps"]) for r in rows] == [
        ("b3", "degraded", pytest.approx(0.024), None),
        ("b2", "ok", 2.0, 2.1),
    ]
    assert health.peer_bandwidth(nodes[0], None) == []


def test_it_reads_the_fleet_in_a_bounded_number_of_queries(django_assert_max_num_queries):
    nodes = make_nodes([f"f{i}" for i in range(12)])
    for _ in range(3):
        make_sweep(nodes, {("f0", "f1"): TIMEOUT}, findings=[("fail", "f0<->f1", "x")])
    with django_assert_max_num_queries(6):
        found = health.fleet_health(nodes)
    assert found["f0"].failing_peers == [("f1", "timeout")]
    assert timezone.now() - timedelta(minutes=1) < Sweep.objects.get(pk=found["f0"].since_sweep).created
