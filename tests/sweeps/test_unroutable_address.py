"""A sweep whose node advertises an address its peers cannot reach: its findings, and what they may drain."""

from __future__ import annotations

import pytest
from django.utils import timezone

from cluster_health.actions import blame
from cluster_health.models import Finding, Node, PairProbe, Sweep
from cluster_health.sweeps import findings
from tests.support.advertised_pairs import NODES, advertising, facts_of

pytestmark = pytest.mark.django_db

DEAD = "10.9.0.2"  # n2's second NIC, on a dead network


def closed_sweep(pairs, addresses, outcome=None):
    """The sweep as its close finds it: nodes with their addresses and facts, its pairs, then its findings."""
    now = timezone.now()
    ids = {}
    for n in NODES:
        node = Node.objects.create(
            name=n, address=addresses[n], facts=facts_of(n, DEAD if n == "n2" else None), last_heartbeat=now
        )
        ids[n] = node.pk
    sweep = Sweep.objects.create(
        kind="connectivity", nodes=NODES, started=now, finished=now, status="finished", total_rounds=3
    )
    for p in pairs:
        ev = dict(p["evidence"])
        if outcome and p["status"] == "failed":
            ev["confirmation"] = {"outcome": outcome}
        PairProbe.objects.create(
            sweep=sweep,
            round=1,
            node_a_id=ids[p["a"]],
            node_b_id=ids[p["b"]],
            status=p["status"],
            stage=p["stage"],
            reason=p["reason"],
            finished=now,
            evidence=ev,
        )
    found, _ = findings.sweep_findings(sweep)
    for f in found:
        Finding.objects.create(
            sweep=sweep,
            severity=f["severity"],
            code=f["code"],
            subject=f["subject"],
            text=f["text"],
            pairs=f.get("pairs") or [],
            detail=f.get("detail") or {},
        )
    return sweep, found


def test_the_sweep_names_the_address_in_one_fail_line_and_drains_it_once_confirmed():
    addresses, pairs = advertising("n2", DEAD)
    sweep, found = closed_sweep(pairs, addresses, outcome="confirmed")
    fails = [(f["code"], f["subject"]) for f in found if f["severity"] == "fail"]
    assert fails == [("unroutable_address", "n2")], found
    said = found[[f["code"] for f in found].index("unroutable_address")]
    assert f"{DEAD} (eth1)" in said["text"] and "--address 10.0.0.2" in said["text"], said["text"]
    assert [(b.code, b.nodes) for b in blame.confirmed_findings(sweep)] == [("unroutable_address", ("n2",))]


def test_seen_once_it_is_named_and_drains_nothing():
    addresses, pairs = advertising("n2", DEAD)
    sweep, found = closed_sweep(pairs, addresses)  # the pass did not look again
    assert ("unroutable_address", "n2") in [(f["code"], f["subject"]) for f in found]
    assert blame.confirmed_findings(sweep) == []
