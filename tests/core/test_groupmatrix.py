"""The group matrix (group x group) and the node matrix of a drill-down, against a count done by hand."""

import math
import random
import statistics

import pytest

from cluster_health.core import groupmatrix, matrix

STATUSES = ("ok", "ok", "ok", "degraded", "failed", "timeout", "offline", "skipped", "pending", "running")


def random_sweep(rng, groups=5, per_group=(1, 7), probed=0.7):
    """Nodes in racks of random sizes, and rows for a random share of the pairs (the rest untested)."""
    nodes, group_of = [], {}
    for g in range(groups):
        for i in range(rng.randint(*per_group)):
            name = f"rack{g}-n{i}"
            nodes.append(name)
            group_of[name] = f"rack{g}"
    rows = []
    for i, a in enumerate(nodes):
        for b in nodes[i + 1 :]:
            if rng.random() < probed:
                st = rng.choice(STATUSES)
                bw = round(rng.uniform(0.5, 20), 3) if st in ("ok", "degraded") and rng.random() < 0.9 else None
                rows.append((a, b, st, bw, 10.0, None, None, None))
    return nodes, group_of, rows


def by_hand(nodes, group_of, rows):
    """Each unordered group pair: (pairs, tested, bad, worst, busbw values)."""
    cells = {}
    members = {}
    for n in nodes:
        members.setdefault(group_of[n], []).append(n)
    for g, mine in members.items():
        for h, theirs in members.items():
            key = tuple(sorted((g, h)))
            count = len(mine) * (len(mine) - 1) // 2 if g == h else len(mine) * len(theirs)
            cells[key] = [count, 0, 0, "untested", []]
    for a, b, st, bw, *_ in rows:
        cell = cells[tuple(sorted((group_of[a], group_of[b])))]
        cell[1] += 1
        cell[2] += st in matrix.BAD_STATUSES
        if groupmatrix.WORST_ORDER.index(st) > groupmatrix.WORST_ORDER.index(cell[3]):
            cell[3] = st
        if bw is not None:
            cell[4].append(bw)
    return cells


def decoded(payload):
    return {
        "pairs": matrix.decode(payload["pairs"], "I"),
        "tested": matrix.decode(payload["tested"], "I"),
        "bad": matrix.decode(payload["bad"], "I"),
        "worst": matrix.decode(payload["worst"], "B"),
        "median": matrix.decode(payload["busbw_median"], "f"),
        "min": matrix.decode(payload["busbw_min"], "f"),
    }


@pytest.mark.parametrize("seed", range(12))
def test_every_cell_sums_up_the_pairs_between_its_two_groups(seed):
    rng = random.Random(seed)
    nodes, group_of, rows = random_sweep(rng)
    payload = groupmatrix.build(matrix.build_matrix_arrays(nodes, rows), group_of)
    expected = by_hand(nodes, group_of, rows)
    got = decoded(payload)
    names = payload["groups"]
    assert names == matrix.natural_sorted(group_of.values())
    assert payload["sizes"] == [sum(1 for n in nodes if group_of[n] == g) for g in names]
    for g in range(len(names)):
        for h in range(g, len(names)):
            k = groupmatrix.cell_index(g, h, len(names))
            count, tested, bad, worst, bws = expected[(names[g], names[h])]
            assert (got["pairs"][k], got["tested"][k], got["bad"][k]) == (count, tested, bad)
            assert payload["status_codes"][got["worst"][k]] == worst
            if bws:
                assert got["median"][k] == pytest.approx(statistics.median(bws), rel=1e-6)
                assert got["min"][k] == pytest.approx(min(bws), rel=1e-6)
            else:
                assert math.isnan(got["median"][k]) and math.isnan(got["min"][k])


def test_one_failure_among_thousands_colours_its_cell_and_no_other():
    nodes = [f"r{g}-n{i:02d}" for g in range(3) for i in range(40)]
    rows = [(a, b, "ok", 5.0, 10.0, None, None, None) for i, a in enumerate(nodes) for b in nodes[i + 1 :]]
    rows.append(("r0-n03", "r2-n17", "failed", None, None, "connect", "refused", None))
    payload = groupmatrix.build(matrix.build_matrix_arrays(nodes, rows), {n: n.split("-")[0] for n in nodes})
    got = decoded(payload)
    worst = {
        (payload["groups"][g], payload["groups"][h]): payload["status_codes"][
            got["worst"][groupmatrix.cell_index(g, h, 3)]
        ]
        for g in range(3)
        for h in range(g, 3)
    }
    assert worst.pop(("r0", "r2")) == "failed"
    assert set(worst.values()) == {"ok"}
    assert got["bad"][groupmatrix.cell_index(0, 2, 3)] == 1


def test_an_open_block_shows_pending_until_a_worse_result_arrives():
    nodes = ["a-1", "a-2", "b-1", "b-2"]
    group_of = {n: n.split("-")[0] for n in nodes}

    def worst_between_a_and_b(rows):
        payload = groupmatrix.build(matrix.build_matrix_arrays(nodes, rows), group_of)
        return payload["status_codes"][decoded(payload)["worst"][groupmatrix.cell_index(0, 1, 2)]]

    ok = ("a-1", "b-1", "ok", 1.0, 1.0, None, None, None)
    pending = ("a-2", "b-2", "pending", None, None, None, None, None)
    assert worst_between_a_and_b([ok]) == "ok"
    assert worst_between_a_and_b([ok, pending]) == "pending"
    assert worst_between_a_and_b([ok, pending, ("a-1", "b-2", "degraded", 0.2, 1.0, None, None, None)]) == "degraded"
    assert worst_between_a_and_b([]) == "untested"


def test_a_sparse_sweep_over_4096_nodes_counts_only_what_it_probed():
    nodes = [f"r{g:02d}-n{i:02d}" for g in range(64) for i in range(64)]
    rng = random.Random(7)
    order = nodes[:]
    rng.shuffle(order)
    rows = [(order[k], order[k + 1], "ok", 3.0, 1.0, None, None, None) for k in range(0, len(order), 2)]
    payload = groupmatrix.build(matrix.build_matrix_arrays(nodes, rows), {n: n.split("-")[0] for n in nodes})
    got = decoded(payload)
    assert len(payload["groups"]) == 64 and payload["nodes"] == 4096
    assert sum(got["tested"]) == 2048
    assert sum(got["pairs"]) == 4096 * 4095 // 2


def test_a_node_without_a_group_is_a_group_of_its_own():
    nodes = ["a-1", "a-2", "lonely"]
    rows = [("a-1", "lonely", "failed", None, None, None, None, None)]
    payload = groupmatrix.build(matrix.build_matrix_arrays(nodes, rows), {"a-1": "a", "a-2": "a"})
    assert payload["groups"] == ["a", "lonely"]
    assert payload["sizes"] == [2, 1]
    assert groupmatrix.members({"a-1": "a", "a-2": "a"}, nodes, ["lonely"]) == ["lonely"]


def test_more_groups_than_a_summary_shows_is_refused_with_what_to_do():
    nodes = [f"n{i}" for i in range(groupmatrix.MAX_GROUPS + 1)]
    arrays = matrix.build_matrix_arrays(nodes, [])
    with pytest.raises(groupmatrix.TooManyGroups, match="declare"):
        groupmatrix.build(arrays, {n: n for n in nodes})


@pytest.mark.parametrize("seed", range(5))
def test_a_drill_down_is_the_node_matrix_of_those_nodes_alone(seed):
    rng = random.Random(seed)
    nodes, group_of, rows = random_sweep(rng, groups=4)
    rows = [
        (*r[:5], "connect" if r[2] == "failed" else None, "refused" if r[2] == "failed" else None, None) for r in rows
    ]
    whole = matrix.build_matrix_arrays(nodes, rows)
    wanted = groupmatrix.members(group_of, nodes, ["rack1", "rack3"])
    inside = {n for n in wanted}
    alone = matrix.build_matrix_arrays(wanted, [r for r in rows if r[0] in inside and r[1] in inside])
    assert whole.restricted(wanted).payload() == alone.payload()
