"""How an idle-gap sweep picks its nodes: the stale pairs it can measure now, as many of them as its nodes allow.

No database: ``choose`` takes the coverage as a dictionary, as benchmarks/coverage.py drives it."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from cluster_health import coverage
from cluster_health.core import planner
from cluster_health.models import pair_key
from cluster_health.sweeps import idle

NOW = datetime(2026, 3, 1, tzinfo=UTC)


def every_pair(names, at):
    return {pair_key(a, b): at for i, a in enumerate(names) for b in names[i + 1 :]}


def test_a_never_measured_pair_goes_first_and_every_pair_among_the_chosen_is_swept_stalest_first():
    names = ["n1", "n2", "n3", "n4"]
    measured = every_pair(names, NOW - timedelta(hours=1))
    measured[("n2", "n3")] = NOW - timedelta(days=3)
    del measured[("n1", "n4")]
    chosen, pairs = idle.choose(names, 3, measured, NOW)
    assert set(chosen) >= {"n1", "n4"} and len(chosen) == 3
    assert pairs[0] == ("n1", "n4")
    assert {pair_key(a, b) for a, b in pairs} == {pair_key(a, b) for i, a in enumerate(chosen) for b in chosen[i + 1 :]}


def test_it_holds_the_nodes_that_share_the_most_stale_pairs_not_the_ends_of_a_few():
    """Once most of the fleet is covered, the stale pairs are scattered: four nodes that share six week-old pairs
    measure more than the ends of two pairs a day older, which share nothing else stale."""
    names = [f"n{i}" for i in range(1, 11)]
    measured = every_pair(names, NOW - timedelta(hours=2))
    for pair in (("n1", "n2"), ("n3", "n4")):
        measured[pair] = NOW - timedelta(days=8)
    clique = ["n6", "n7", "n8", "n9"]
    measured.update(every_pair(clique, NOW - timedelta(days=7)))
    chosen, pairs = idle.choose(names, 4, measured, NOW)
    assert chosen == clique
    assert len(pairs) == 6


def test_ties_go_to_the_candidates_order_and_too_few_candidates_are_all_taken():
    names = [f"n{i}" for i in range(6)]
    assert idle.choose(names, 3, {}, NOW)[0] == ["n0", "n1", "n2"]
    assert idle.choose(names[:3], 8, {}, NOW)[0] == names[:3]


def test_it_never_picks_a_node_outside_the_candidates():
    """The candidates are the nodes Slurm has idle: a stale pair with a busy node is not reachable now."""
    fleet = [f"n{i}" for i in range(8)]
    measured = every_pair(fleet, NOW - timedelta(hours=1))
    measured[("n0", "n7")] = NOW - timedelta(days=30)  # n7 runs a job
    measured[("n5", "n6")] = NOW - timedelta(days=2)
    chosen, pairs = idle.choose(fleet[:7], 4, measured, NOW)
    assert "n7" not in chosen and all("n7" not in p for p in pairs)
    assert {"n5", "n6"} <= set(chosen) and pairs[0] == ("n5", "n6")


def test_staleness_is_age_squared_and_never_measured_outweighs_any_age():
    names = ["a", "b", "c"]
    w = coverage.staleness(names, {("a", "b"): NOW - timedelta(seconds=10), ("a", "c"): NOW}, NOW)
    assert w[0][1] == w[1][0] == 100.0 and w[0][2] == 0.0 and w[0][0] == 0.0
    assert w[1][2] == coverage.NEVER_AGE_S**2 > (365 * 86400.0) ** 2


def test_the_busy_nodes_caught_are_those_whose_pairs_with_the_idle_ones_are_stalest():
    idle_now = ["n1", "n2", "n3"]
    busy = ["n4", "n5", "n6", "n7"]
    measured = every_pair(idle_now + busy, NOW - timedelta(hours=1))
    measured[("n1", "n6")] = NOW - timedelta(days=9)
    measured[("n2", "n5")] = NOW - timedelta(days=4)
    measured[("n3", "n5")] = NOW - timedelta(days=4)
    measured[("n4", "n7")] = NOW - timedelta(days=90)  # two busy nodes: no idle sweep can pair them now
    assert idle.to_catch(busy, idle_now, measured, NOW, 2) == ["n6", "n5"]
    assert idle.to_catch(busy, idle_now, measured, NOW, 0) == []
    assert idle.to_catch(busy, [], measured, NOW, 2) == []


def test_fit_rounds_keeps_what_the_first_fit_places_within_its_rounds_in_order():
    pairs = [("a", "b"), ("a", "c"), ("c", "d"), ("b", "a"), ("a", "d"), ("b", "c"), ("e", "f"), ("a", "e")]
    kept = planner.fit_rounds(pairs, 2)
    # Round 1: a-b, c-d, e-f; round 2: a-c; a-d needs a third round (a is in both), b-c fits neither (c, then
    # b and c are both taken in rounds 1 and 2), a-e the same; the repeated b-a is dropped.
    assert kept == [("a", "b"), ("a", "c"), ("c", "d"), ("e", "f")]
    rounds = planner.schedule_pairs(kept, list("abcdef"))
    assert len(rounds) == 2 and sorted(map(len, rounds)) == [1, 3]
    assert planner.fit_rounds(pairs, 0) == []
    everything = [(a, b) for i, a in enumerate("abcdef") for b in "abcdef"[i + 1 :]]
    assert planner.fit_rounds(everything, 99) == everything


def test_bounded_by_rounds_it_takes_the_stalest_pairs_among_many_nodes_and_holds_only_their_nodes():
    """Eight idle nodes, four stale pairs that share no node and the rest fresh: one round measures all four,
    where every pair among a few nodes would spend rounds on fresh ones."""
    names = [f"n{i}" for i in range(8)]
    measured = every_pair(names, NOW - timedelta(hours=1))
    stale = [("n0", "n5"), ("n1", "n6"), ("n2", "n7"), ("n3", "n4")]
    for i, pair in enumerate(stale):
        measured[pair] = NOW - timedelta(days=10 - i)
    chosen, pairs = idle.choose(names, 8, measured, NOW, max_rounds=1)
    assert pairs == stale and chosen == names
    # Two stale pairs on the same node cannot share a round: the staler goes first, the other waits.
    measured[("n0", "n1")] = NOW - timedelta(days=30)
    chosen, pairs = idle.choose(names, 8, measured, NOW, max_rounds=1)
    # The round's last two nodes get their stalest pair, fresh or not: the hold lasts the round anyway.
    assert pairs == [("n0", "n1"), ("n2", "n7"), ("n3", "n4"), ("n5", "n6")] and chosen == names
    assert len(planner.schedule_pairs(pairs, chosen)) == 1
    # A node no kept pair has is not held: three nodes, one round, one pair.
    assert idle.choose(["n0", "n1", "n2"], 3, {}, NOW, max_rounds=1) == (["n0", "n1"], [("n0", "n1")])
    chosen, pairs = idle.choose(names, 8, measured, NOW, max_rounds=2)
    assert pairs[:4] == [("n0", "n1"), ("n0", "n5"), ("n1", "n6"), ("n2", "n7")]
    assert len(planner.schedule_pairs(pairs, chosen)) == 2 and len(pairs) == 8
