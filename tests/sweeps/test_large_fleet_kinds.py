"""The large-fleet kinds end to end in-process: sampled, topology and bisect sweeps planned, answered
as agents answer them, judged, and shown (API, CLI and page)."""

from __future__ import annotations

import json

import pytest
from django.core.management import call_command

from cluster_health.core import planner
from cluster_health.models import Finding, Node, PairProbe, Sweep
from cluster_health.shapes import documents
from devtools.sweep_driver import heartbeat, result_for
from tests.support.dashboard_rows import make_user

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("memory_channel_layer")]


def fleet(names):
    """Every node of ``names`` sends a heartbeat; returns the names."""
    for n in names:
        heartbeat(n)
    return names


def numbered(count: int) -> list[str]:
    return [f"n{i:02d}" for i in range(count)]


def pair_set(sweep):
    return {
        frozenset(p)
        for p in PairProbe.objects.filter(sweep=sweep).values_list("node_a__name", "node_b__name").order_by()
    }


def answer(failing):
    """Agents' answers: a pair ``failing(a, b)`` names times out at connect, the others pass."""
    peers: dict[int, set[str]] = {}

    def reply(cmd):
        probe = PairProbe.objects.select_related("node_a", "node_b").get(pk=cmd["probe_id"])
        a, b = probe.node_a.name, probe.node_b.name
        peers.setdefault(cmd["probe_id"], set()).add(cmd["node"])
        if failing(a, b):
            return result_for(cmd, status="timeout", stage="connect", reason="connect_timeout")
        return result_for(cmd)

    return reply


def test_a_sampled_sweep_runs_its_rounds_records_its_seed_and_runs_the_same_pairs_again(driver):
    names = fleet(numbered(12))
    first = driver.sweep(kind="sampled", rounds=3)
    driver.answer_all(answer(lambda a, b: False))
    first.refresh_from_db()
    seed = first.params["seed"]
    assert first.status == "finished" and first.verdict == "pass", first.error
    assert first.total_rounds == 3 and PairProbe.objects.filter(sweep=first).count() == 3 * 6
    for k in (1, 2, 3):  # every node in every round
        in_round = PairProbe.objects.filter(sweep=first, round=k).values_list("node_a__name", "node_b__name")
        assert sorted(n for pair in in_round for n in pair) == names
    assert PairProbe.objects.filter(sweep=first, status="ok").exclude(busbw_gbps=None).count() == 18  # bandwidth
    again = driver.sweep(kind="sampled", rounds=3, seed=seed)
    driver.answer_all(answer(lambda a, b: False))
    assert pair_set(again) == pair_set(first)
    shown = documents.sweep_json(first, with_pairs=False)
    assert shown["plan"] == {"sample_rounds": 3, "seed": seed}


def test_a_sampled_sweep_names_a_dead_node_in_its_first_round(driver):
    fleet(numbered(10))
    sweep = driver.sweep(kind="sampled", rounds=2, seed=11)
    driver.answer_all(answer(lambda a, b: "n07" in (a, b)))
    sweep.refresh_from_db()
    assert sweep.verdict == "fail"
    subjects = set(Finding.objects.filter(sweep=sweep, severity="fail").values_list("subject", flat=True))
    assert "n07" in subjects, subjects


def test_a_topology_sweep_runs_each_group_fully_and_one_pair_between_groups(driver):
    names = [f"rack{r}-n{i}" for r in (1, 2, 3) for i in (1, 2, 3)] + ["spare7"]
    fleet(names)
    Node.objects.filter(name="spare7").update(topology_group="rack3")  # declared: wins over its name
    sweep = driver.sweep(kind="topology")
    driver.answer_all(answer(lambda a, b: False))
    sweep.refresh_from_db()
    assert sweep.verdict == "pass", sweep.error
    groups = sweep.params["groups"]
    assert {g: len(m) for g, m in groups.items()} == {"rack1": 3, "rack2": 3, "rack3": 4}
    group_of = {n: g for g, members in groups.items() for n in members}
    uplink_rounds = [int(k) for k in sweep.params["uplink_rounds"]]  # one a group, checked in test_planner
    pairs = pair_set(sweep) - {
        frozenset(p)
        for p in PairProbe.objects.filter(sweep=sweep, round__in=uplink_rounds).values_list(
            "node_a__name", "node_b__name"
        )
    }
    inside = {p for p in pairs if len({group_of[n] for n in p}) == 1}
    assert len(inside) == 3 + 3 + 6
    between = sorted(tuple(sorted(group_of[n] for n in p)) for p in pairs - inside)
    assert between == [("rack1", "rack2"), ("rack1", "rack3"), ("rack2", "rack3")]
    assert documents.sweep_json(sweep, with_pairs=False)["plan"] == {"groups": {"rack1": 3, "rack2": 3, "rack3": 4}}


def test_a_bisect_sweep_pins_a_bad_node_with_rounds_around_it_only(driver):
    fleet(numbered(12))
    sweep = driver.sweep(kind="bisect")
    sweep.refresh_from_db()
    assert sweep.total_rounds == planner.QUICK_ROUNDS
    driver.answer_all(answer(lambda a, b: "n05" in (a, b)))
    sweep.refresh_from_db()
    assert sweep.status == "finished" and sweep.verdict == "fail"
    assert sweep.params["bisect_phase"] >= 2 and sweep.total_rounds > planner.QUICK_ROUNDS
    later = PairProbe.objects.filter(sweep=sweep, round__gt=planner.QUICK_ROUNDS)
    suspects = set(sweep.params["bisect_suspects"])
    assert "n05" in suspects
    assert all({p.node_a.name, p.node_b.name} & suspects for p in later.select_related("node_a", "node_b"))
    assert PairProbe.objects.filter(sweep=sweep).count() < 12 * 11 // 2 // 3  # far from every pair
    fails = list(Finding.objects.filter(sweep=sweep, severity="fail").values_list("code", "subject"))
    assert any(subject == "n05" for _, subject in fails), fails
    assert not any(subject in suspects - {"n05"} for _, subject in fails), fails


def test_a_bisect_sweep_pins_a_bad_link_and_clears_both_its_nodes(driver):
    fleet(numbered(12))
    sweep = driver.sweep(kind="bisect")
    first = PairProbe.objects.filter(sweep=sweep, round=1).select_related("node_a", "node_b").first()
    link = {first.node_a.name, first.node_b.name}
    driver.answer_all(answer(lambda a, b: {a, b} == link))
    sweep.refresh_from_db()
    assert sweep.verdict == "fail"
    for node in link:  # each answered its clean partners: the link, not the node
        clean = [
            p.status
            for p in PairProbe.objects.filter(sweep=sweep).select_related("node_a", "node_b")
            if node in (p.node_a.name, p.node_b.name) and {p.node_a.name, p.node_b.name} != link
        ]
        assert len(clean) >= planner.BISECT_PARTNERS and set(clean) == {"ok"}, clean
    fails = list(Finding.objects.filter(sweep=sweep, severity="fail").values_list("code", "subject"))
    assert fails and not any(subject in link for _, subject in fails), fails


def test_a_bisect_sweep_with_nothing_wrong_is_its_quick_pass(driver):
    fleet(numbered(6))
    sweep = driver.sweep(kind="bisect")
    driver.answer_all(answer(lambda a, b: False))
    sweep.refresh_from_db()
    assert sweep.verdict == "pass" and sweep.total_rounds == planner.QUICK_ROUNDS
    assert sweep.params["bisect_phase"] == 1


def test_the_cli_takes_rounds_and_seed_and_the_page_shows_the_seed(driver, client, capsys):
    fleet(["a1", "a2", "a3", "a4"])
    driver.run(call_command, "sweep", "--kind", "sampled", "--rounds", "2", "--seed", "99", "--json")
    sweep = Sweep.objects.latest("pk")
    assert json.loads(capsys.readouterr().out)["plan"] == {"sample_rounds": 2, "seed": 99}
    client.force_login(make_user("viewer", operator=False))
    page = client.get(f"/sweeps/{sweep.pk}/").content.decode()
    assert "2 sampled rounds, seed <span data-seed>99</span>" in page


def test_the_start_page_offers_the_large_fleet_kinds_and_passes_rounds_and_seed(driver, client):
    fleet(["a1", "a2", "a3"])
    client.force_login(make_user("op", operator=True))
    page = client.get("/sweeps/new/").content.decode()
    for kind in ("sampled", "topology", "bisect"):
        assert f'value="{kind}"' in page
    r = driver.run(client.post, "/sweeps/new/", {"kind": "sampled", "backend": "gloo", "rounds": "2", "seed": "5"})
    assert r.status_code == 302, r.content.decode()[:2000]
    sweep = Sweep.objects.latest("pk")
    assert sweep.kind == "sampled" and (sweep.params["rounds"], sweep.params["seed"]) == (2, 5)
