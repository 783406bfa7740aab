"""The planner: circle-method rounds, byes, kinds, and its speed at 1,024 nodes."""

import itertools

import pytest

from cluster_health.core import planner


def names(n):
    return [f"n{i:04d}" for i in range(n)]


def assert_disjoint_rounds(rounds):
    for r in rounds:
        seen = [n for pair in r for n in pair]
        assert len(seen) == len(set(seen)), f"a node is in two probes of one round: {r}"


@pytest.mark.parametrize("n", [2, 3, 4, 5, 8, 9, 16])
def test_it_covers_every_pair_exactly_once(n):
    nodes = names(n)
    rounds = planner.circle_rounds(nodes)
    pairs = [p for r in rounds for p in r]
    assert len(pairs) == n * (n - 1) // 2
    assert {frozenset(p) for p in pairs} == {frozenset(p) for p in itertools.combinations(nodes, 2)}
    assert_disjoint_rounds(rounds)


def test_it_uses_n_minus_one_rounds_of_n_half_pairs_for_even_n():
    rounds = planner.circle_rounds(names(8))
    assert len(rounds) == 7
    assert all(len(r) == 4 for r in rounds)


def test_it_gives_one_bye_per_round_for_odd_n():
    nodes = names(5)
    rounds = planner.circle_rounds(nodes)
    assert len(rounds) == 5
    assert all(len(r) == 2 for r in rounds)
    byes = [next(n for n in nodes if all(n not in p for p in r)) for r in rounds]
    assert sorted(byes) == nodes  # every node sits out exactly once


def test_it_orients_pairs_in_node_order():
    nodes = ["c", "a", "b", "d"]
    for r in planner.circle_rounds(nodes):
        for a, b in r:
            assert nodes.index(a) < nodes.index(b)


def test_it_puts_every_node_in_a_pair_in_a_quick_sweep():
    for n in (2, 3, 4, 5, 7, 10):
        p = planner.plan("quick", names(n))
        assert len(p.rounds) <= 2
        assert {x for r in p.rounds for pair in r for x in pair} == set(names(n))
        assert_disjoint_rounds(p.rounds)


def test_it_packs_explicit_pairs_into_disjoint_rounds():
    nodes = names(4)
    p = planner.plan("pairs", nodes, [("n0000", "n0001"), ("n0001", "n0000"), ("n0002", "n0001"), ("n0002", "n0003")])
    pairs = [pair for r in p.rounds for pair in r]
    assert sorted(pairs) == [("n0000", "n0001"), ("n0001", "n0002"), ("n0002", "n0003")]
    assert_disjoint_rounds(p.rounds)
    assert len(p.rounds) == 2


def test_it_rejects_unknown_nodes_and_self_pairs():
    with pytest.raises(planner.PlanError, match="not one of"):
        planner.plan("pairs", ["a", "b"], [("a", "z")])
    with pytest.raises(planner.PlanError, match="itself"):
        planner.plan("pairs", ["a", "b"], [("a", "a")])
    with pytest.raises(planner.PlanError, match="at least 2"):
        planner.plan("full", ["a"])
    with pytest.raises(planner.PlanError, match="kind"):
        planner.plan("bogus", ["a", "b"])


def test_it_ends_full_and_group_sweeps_with_a_group_collective():
    assert planner.plan("full", names(4)).group
    assert not planner.plan("connectivity", names(4)).group
    g = planner.plan("group", names(4))
    assert g.group and g.rounds == []


def test_it_plans_1024_nodes_in_rounds_that_cover_every_pair():
    # How long planning takes is a benchmark figure (benchmarks/run.py --only planner), not a test's.
    p = planner.plan("full", names(1024))
    assert len(p.rounds) == 1023
    assert p.pair_count == 523_776
    assert_disjoint_rounds(p.rounds[:5])
