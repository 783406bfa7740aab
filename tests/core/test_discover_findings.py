"""Discover sweeps: planned as every pair, and read per node into the interface to set."""

import pytest

from cluster_health.core import discovery, planner


def row(a, ia, b, ib, ok):
    return {
        "rank0_node": a,
        "rank0_interface": ia,
        "rank0_address": f"{a}-{ia}",
        "rank1_node": b,
        "rank1_interface": ib,
        "rank1_address": f"{b}-{ib}",
        "ok": ok,
    }


def two_nics(a, b):
    """eth1 is on a dead network: eth1 <-> eth1 fails; Gloo still connects eth0 <-> eth1 over eth0's route."""
    return [row(a, x, b, y, "eth0" in (x, y)) for x in ("eth0", "eth1") for y in ("eth0", "eth1")]


def everyone(nodes):
    return {n: {m for m in nodes if m != n} for n in nodes}


def test_it_plans_a_discover_sweep_as_every_pair_without_a_group():
    plan = planner.plan("discover", ["n1", "n2", "n3", "n4"])
    assert plan.pair_count == 6 and len(plan.rounds) == 3 and not plan.group


def test_it_names_the_working_interface_and_warns_about_the_dead_one():
    nodes = ["h1", "h2", "h3"]
    rows = [two_nics("h1", "h2"), two_nics("h1", "h3"), two_nics("h2", "h3")]
    found = discovery.interface_findings(rows, everyone(nodes))
    per_node = {f["subject"]: f for f in found if f["subject"] != "cluster"}
    assert set(per_node) == set(nodes)
    for node, f in per_node.items():
        assert (f["severity"], f["code"]) == ("warn", "interface_dead")
        peers = sorted(set(nodes) - {node})
        assert f"{node}: eth0 ({node}-eth0) connects to all 2 peers" in f["text"]
        assert f"eth1 ({node}-eth1) fails with {peers[0]}:eth1, {peers[1]}:eth1" in f["text"]
        assert f"Set GLOO_SOCKET_IFNAME=eth0 NCCL_SOCKET_IFNAME=eth0 on {node}" in f["text"]
    cluster = [f for f in found if f["subject"] == "cluster"]
    assert cluster and "GLOO_SOCKET_IFNAME=eth0" in cluster[0]["text"]


def test_it_fails_a_node_that_no_single_interface_connects_to_every_peer():
    # h1's eth0 reaches h2 only, its eth1 reaches h3 only: no one setting works for a job on all three.
    rows = [
        [row("h1", "eth0", "h2", "eth0", True), row("h1", "eth1", "h2", "eth0", False)],
        [row("h1", "eth0", "h3", "eth0", False), row("h1", "eth1", "h3", "eth0", True)],
        [row("h2", "eth0", "h3", "eth0", True)],
    ]
    found = {f["subject"]: f for f in discovery.interface_findings(rows, everyone(["h1", "h2", "h3"]))}
    assert (found["h1"]["severity"], found["h1"]["code"]) == ("fail", "interface_none")
    assert "eth0 (h1-eth0) connects to h2;" in found["h1"]["text"]
    assert "eth1 (h1-eth1) connects to h3)" in found["h1"]["text"]
    assert "cluster" not in found


def test_a_pair_whose_probe_never_ran_blames_no_interface():
    rows = [two_nics("h1", "h2"), [], []]  # h3 was offline: its pairs have no rows
    found = {f["subject"]: f for f in discovery.interface_findings(rows, everyone(["h1", "h2", "h3"]))}
    assert set(found) == {"h1", "h2", "cluster"} and found["h1"]["code"] == "interface_dead"


def test_it_sets_interfaces_per_node_when_names_differ():
    rows = [[row("h1", "eth0", "h2", "enp1s0", True), row("h1", "eth0", "h2", "ib0", False)]]
    found = {f["subject"]: f for f in discovery.interface_findings(rows, everyone(["h1", "h2"]))}
    assert "h2 GLOO_SOCKET_IFNAME=enp1s0" in found["cluster"]["text"], found
    assert "h2: enp1s0 (h2-enp1s0) connects to its peer; ib0 (h2-ib0) fails with h1:eth0" in found["h2"]["text"]


def test_a_combination_fails_when_either_rank_saw_it_fail():
    mine = {"extra": {"interfaces": [row("h1", "eth0", "h2", "eth0", True)]}}
    theirs = {"extra": {"interfaces": [row("h1", "eth0", "h2", "eth0", False)]}}
    assert [r["ok"] for r in discovery.combination_rows(mine, theirs)] == [False]
    assert [r["ok"] for r in discovery.combination_rows(None, mine)] == [True]
    assert discovery.combination_rows(None, None) == []


@pytest.mark.parametrize("registered, expected", [("h1-eth1", "eth1"), ("elsewhere", "eth0")])
def test_it_prefers_the_registered_address_among_interfaces_that_all_work(registered, expected):
    rows = [[row("h1", x, "h2", "enp1s0", True) for x in ("eth0", "eth1")]]
    found = {f["subject"]: f for f in discovery.interface_findings(rows, everyone(["h1", "h2"]), {"h1": registered})}
    assert f"GLOO_SOCKET_IFNAME={expected} " in found["h1"]["text"] and found["h1"]["severity"] == "info"


@pytest.mark.django_db
@pytest.mark.usefixtures("memory_channel_layer")
def test_a_discover_sweep_sends_discover_probes_and_names_the_interface_per_node(driver):
    from agents import contract
    from cluster_health.models import Finding, PairProbe, Sweep
    from devtools.sweep_driver import heartbeat, result_for

    names = ["n0", "n1", "n2"]
    for name in names:
        heartbeat(name)
    sweep = driver.sweep(kind="discover", timeouts={"init": 4.0})
    sent = []

    def answer(cmd):
        sent.append(cmd)
        me = cmd["node"]
        peer = cmd["peers"][0]["name"]
        a, b = (me, peer) if cmd["rank"] == 0 else (peer, me)
        return result_for(cmd, extra={"interfaces": two_nics(a, b)})

    driver.answer_all(answer)
    sweep = Sweep.objects.get(pk=sweep.pk)
    assert {c["kind"] for c in sent} == {"discover"} and len(sent) == 6
    timeouts = sent[0]["timeouts"]
    assert sent[0]["deadline_s"] == contract.default_deadline(timeouts) - 4.0 + contract.discover_budget_s(4.0)
    assert PairProbe.objects.filter(sweep=sweep, status="ok").count() == 3
    dead = Finding.objects.filter(sweep=sweep, code="interface_dead").order_by("subject")
    assert [f.subject for f in dead] == names and all("GLOO_SOCKET_IFNAME=eth0" in f.text for f in dead)
    assert (sweep.status, sweep.verdict) == ("finished", "warn")
