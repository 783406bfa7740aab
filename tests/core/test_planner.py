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


@pytest.mark.parametrize("n", [2, 3, 4, 5, 6, 7, 10, 33])
def test_a_quick_sweep_preferring_the_stalest_pairs_takes_them_first_and_still_puts_every_node_in_a_pair(n):
    import random

    nodes = names(n)
    everything = list(itertools.combinations(nodes, 2))
    random.Random(n).shuffle(everything)  # a coverage order: stalest first
    p = planner.plan("quick", nodes, everything)
    assert len(p.rounds) == min(2, planner.circle_round_count(n))
    assert_disjoint_rounds(p.rounds)
    probed = [tuple(sorted(pair)) for r in p.rounds for pair in r]
    assert len(probed) == len(set(probed)), "no pair twice"
    assert {x for r in p.rounds for pair in r for x in pair} == set(nodes)
    for r in p.rounds:  # every node in every round but the one bye of odd N
        assert len({x for pair in r for x in pair}) >= n - n % 2 - (2 if n > 3 else 0)
    first = p.rounds[0]
    assert tuple(sorted(everything[0])) in [tuple(sorted(x)) for x in first]  # the stalest pair is measured
    assert all(nodes.index(a) < nodes.index(b) for r in p.rounds for a, b in r)  # in matrix order


def test_a_quick_sweep_preferring_pairs_swaps_partners_rather_than_leave_two_nodes_out():
    # Round one measured a-b and c-d; in round two the preferred a-c leaves b and d, which could meet, but with
    # a-b preferred again and used, the fill must still pair everyone: a-c and b-d, or a-d and b-c.
    nodes = ["a", "b", "c", "d"]
    p = planner.plan("quick", nodes, [("a", "b"), ("c", "d"), ("a", "c")])
    assert p.rounds[0] == [("a", "b"), ("c", "d")]
    assert sorted(x for pair in p.rounds[1] for x in pair) == nodes


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


# -- the large-fleet kinds ------------------------------------------------------------------


@pytest.mark.parametrize("n", [2, 7, 64, 1024])
def test_a_sampled_round_pairs_every_node_once_and_no_pair_comes_twice(n):
    nodes = names(n)
    rounds = planner.sampled_rounds(nodes, 8, seed=1234)
    assert len(rounds) == min(8, n - 1 if n % 2 == 0 else n)
    assert_disjoint_rounds(rounds)
    for r in rounds:  # every node in each round (one bye with odd N)
        assert len({x for p in r for x in p}) == n - n % 2
    pairs = [frozenset(p) for r in rounds for p in r]
    assert len(pairs) == len(set(pairs))
    position = {x: i for i, x in enumerate(nodes)}
    assert all(position[a] < position[b] for r in rounds for a, b in r)


@pytest.mark.parametrize("seed", range(5))
def test_a_sampled_sweep_of_one_round_over_odd_n_still_probes_every_node(seed):
    nodes = names(7)
    rounds = planner.sampled_rounds(nodes, 1, seed)
    assert {n for r in rounds for p in r for n in p} == set(nodes)
    assert_disjoint_rounds(rounds)


def test_a_sampled_plan_is_the_same_for_its_seed_and_differs_for_another():
    nodes = names(256)
    first = planner.plan("sampled", nodes, rounds=4, seed=7).rounds
    assert planner.plan("sampled", nodes, rounds=4, seed=7).rounds == first
    assert planner.plan("sampled", nodes, rounds=4, seed=8).rounds != first


def test_a_sampled_plan_meets_a_pair_about_as_often_as_its_share_of_the_rounds():
    nodes = names(32)  # 31 rounds in all: 4 of them meet a given link with probability 4/31
    hits = sum(
        any({"n0003", "n0017"} == set(p) for r in planner.sampled_rounds(nodes, 4, seed) for p in r)
        for seed in range(2000)
    )
    assert 0.09 < hits / 2000 < 0.17, hits


def groups_of(n_groups, size):
    return {f"g{g:02d}-n{i:02d}": f"g{g:02d}" for g in range(n_groups) for i in range(size)}


def test_a_topology_plan_covers_each_group_fully_and_every_two_groups_once():
    groups = groups_of(5, 4) | {"lone": "solo"}
    nodes = sorted(groups)
    rounds = planner.topology_rounds(nodes, groups)
    assert_disjoint_rounds(rounds)
    uplinks = planner.topology_uplinks(nodes, groups)
    pairs = [p for k, r in enumerate(rounds) if k not in uplinks for p in r]
    inside = [p for p in pairs if groups[p[0]] == groups[p[1]]]
    between = [frozenset((groups[a], groups[b])) for a, b in pairs if groups[a] != groups[b]]
    for g in {*groups.values()}:
        members = [n for n in nodes if groups[n] == g]
        assert {frozenset(p) for p in inside if groups[p[0]] == g} == {
            frozenset(p) for p in itertools.combinations(members, 2)
        }
    assert sorted(map(sorted, between)) == sorted(sorted(p) for p in itertools.combinations({*groups.values()}, 2))
    assert "lone" in {x for p in pairs for x in p}  # a group of one still meets every other group


def test_a_topology_plan_takes_64_rounds_at_1024_nodes_in_32_groups_of_32():
    groups = groups_of(32, 32)
    rounds = planner.plan("topology", sorted(groups), groups=groups).rounds
    assert len(rounds) == 64  # 31 inside, side by side, the 496 pairs between groups in one, 32 uplink rounds
    uplink_pairs = 32 * planner.UPLINK_SENDERS
    assert sum(len(r) for r in rounds) == 32 * (32 * 31 // 2) + 32 * 31 // 2 + uplink_pairs


def test_a_topology_plan_refuses_a_node_without_a_group():
    with pytest.raises(planner.PlanError, match="n0001 has no group"):
        planner.topology_rounds(names(2), {"n0000": "a"})


def outcome(*pairs):
    """{(a, b): passed} from "0-1+" (passed) and "0-1-" (failed), nodes named n0000..."""
    out = {}
    for p in pairs:
        a, b = p[:-1].split("-")
        out[(f"n{int(a):04d}", f"n{int(b):04d}")] = p.endswith("+")
    return out


def test_bisect_tests_each_suspect_against_two_clean_nodes_spreading_the_load():
    nodes = names(8)
    quick = outcome("0-1-", "2-3+", "4-5+", "6-7+")
    suspects = planner.bisect_suspects(quick)
    assert suspects == {"n0000", "n0001"}
    pairs = planner.bisect_pairs(nodes, quick, suspects)
    for s in suspects:
        partners = [x for p in pairs if s in p for x in p if x != s]
        assert len(set(partners)) == planner.BISECT_PARTNERS and not set(partners) & suspects, pairs
    clean_used = [x for p in pairs for x in p if x not in suspects]
    assert len(clean_used) == len(set(clean_used))  # six clean nodes: none tests two suspects
    assert len(planner.schedule_pairs(pairs, nodes)) == planner.BISECT_PARTNERS  # a node is in one probe a round


def test_bisect_counts_the_quick_phase_s_clean_answers():
    nodes = names(6)
    quick = outcome("0-1-", "0-2+", "1-3+", "0-4+", "1-5+")  # each suspect passed twice with clean nodes
    assert planner.bisect_pairs(nodes, quick, planner.bisect_suspects(quick)) == []  # the link 0-1, pinned


def test_bisect_stops_when_every_suspect_is_pinned_or_nobody_is_clean():
    nodes = names(6)
    quick = outcome("0-1-", "2-3+", "4-5+")
    later = quick | outcome("0-2-", "0-3-", "1-4+", "1-5+")  # n0000 failed with two clean nodes: the node
    assert planner.bisect_pairs(nodes, later, {"n0000", "n0001"}) == []
    split = outcome("0-1-", "2-3-")
    assert planner.bisect_pairs(nodes, split, planner.bisect_suspects(split)) == []


def test_bisect_asks_again_when_a_suspect_s_partners_disagree():
    nodes = names(10)
    quick = outcome("0-1-", "2-3+", "4-5+", "6-7+", "8-9+")
    later = quick | outcome("0-2+", "0-4-", "1-3+", "1-5+")  # n0000's partners disagree; n0001 is fine
    pairs = planner.bisect_pairs(nodes, later, {"n0000", "n0001"})
    assert all("n0000" in p for p in pairs) and len(pairs) == 2 * planner.BISECT_PARTNERS - 2, pairs
    partners = {x for p in pairs for x in p} - {"n0000"}
    assert partners.isdisjoint({"n0001", "n0002", "n0004"})


def test_a_topology_plan_ends_with_one_uplink_round_a_group_of_its_nodes_sending_out_at_once():
    groups = groups_of(3, 5)
    nodes = sorted(groups)
    plan = planner.plan("topology", nodes, groups=groups)
    assert_disjoint_rounds(plan.rounds)
    assert sorted(plan.uplinks.values()) == ["g00", "g01", "g02"]
    assert sorted(plan.uplinks) == list(range(len(plan.rounds) - 3, len(plan.rounds)))  # the last three rounds
    all_pairs = [frozenset(p) for r in plan.rounds for p in r]
    assert len(all_pairs) == len(set(all_pairs))  # an uplink pair is none the sweep probes already
    for k, g in plan.uplinks.items():
        senders = [x for p in plan.rounds[k] for x in p if groups[x] == g]
        partners = [x for p in plan.rounds[k] for x in p if groups[x] != g]
        assert len(senders) == planner.UPLINK_SENDERS and len(set(partners)) == planner.UPLINK_SENDERS
        assert all(groups[a] != groups[b] for a, b in plan.rounds[k])  # every pair crosses the group's uplink
        assert {groups[x] for x in partners} == {"g00", "g01", "g02"} - {g}  # dealt over both other groups
    assert planner.topology_uplinks(nodes, groups) == plan.uplinks


def test_a_small_group_sends_what_it_has_and_one_group_has_no_uplink_round():
    groups = {"a1": "a", "a2": "a", "b1": "b", "b2": "b", "b3": "b", "b4": "b", "b5": "b"}
    plan = planner.plan("topology", sorted(groups), groups=groups)
    by_group = {g: plan.rounds[k] for k, g in plan.uplinks.items()}
    assert len(by_group["a"]) == 2 and len(by_group["b"]) == planner.UPLINK_SENDERS - 2  # b: 2 of its partners taken
    assert planner.plan("topology", ["x1", "x2", "x3"], groups=dict.fromkeys(["x1", "x2", "x3"], "x")).uplinks == {}


@pytest.mark.parametrize("shape", [(2, 4), (3, 3), (5, 7), (16, 16)])
def test_a_sampled_plan_with_groups_draws_half_its_rounds_inside_them_and_half_across(shape):
    groups = groups_of(*shape)
    nodes = sorted(groups)
    rounds = planner.plan("sampled", nodes, rounds=8, seed=11, groups=groups).rounds
    assert_disjoint_rounds(rounds)
    pairs = [frozenset(p) for r in rounds for p in r]
    assert len(pairs) == len(set(pairs))  # no pair twice
    inside = [r for r in rounds if all(groups[a] == groups[b] for a, b in r)]
    across = [r for r in rounds if all(groups[a] != groups[b] for a, b in r)]
    assert len(inside) + len(across) == len(rounds)
    assert len(inside) == min(4, planner.circle_round_count(shape[1]))
    assert len(across) == 4
    for r in across:  # each group's uplink is crossed in each across round, but a bye group's (odd count)
        crossing = {groups[x] for p in r for x in p}
        assert len(crossing) >= shape[0] - (shape[0] % 2)
    assert len(pairs) <= 8 * len(nodes) // 2  # O(N) a night


def test_a_sampled_plan_with_groups_is_the_same_for_its_seed_and_plain_without_two_groups():
    groups = groups_of(4, 6)
    nodes = sorted(groups)
    first = planner.plan("sampled", nodes, rounds=6, seed=3, groups=groups).rounds
    assert planner.plan("sampled", nodes, rounds=6, seed=3, groups=groups).rounds == first
    assert planner.plan("sampled", nodes, rounds=6, seed=4, groups=groups).rounds != first
    one = dict.fromkeys(nodes, "all")
    assert planner.plan("sampled", nodes, rounds=6, seed=3, groups=one).rounds == planner.sampled_rounds(nodes, 6, 3)


def test_a_nightly_sampled_plan_over_the_tree_meets_every_two_groups_within_a_week():
    groups = groups_of(8, 8)
    nodes = sorted(groups)
    met: set[frozenset[str]] = set()
    nights = 0
    while len(met) < 8 * 7 // 2:
        rounds = planner.plan("sampled", nodes, rounds=8, seed=nights, groups=groups).rounds
        met |= {frozenset((groups[a], groups[b])) for r in rounds for a, b in r if groups[a] != groups[b]}
        nights += 1
    assert nights <= 7
