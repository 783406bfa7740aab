"""Topology from the matrix: the groups a full sweep's latency and busbw show, with a confidence per node."""

import numpy as np
import pytest

from cluster_health.core import topology_inference as ti


def bed(racks, moved=None, noise=0.05, seed=0, lat=(12.0, 41.0), bw=(10.0, 2.5)):
    """Nodes, their labels and condensed latency/busbw arrays of racks of the given sizes (moved: node -> rack)."""
    rng = np.random.default_rng(seed)
    nodes, label = [], {}
    for r, size in enumerate(racks):
        for _ in range(size):
            name = f"gpu-{len(nodes) + 1:03d}"
            nodes.append(name)
            label[name] = f"rack-{r + 1}"
    where = {**label, **(moved or {})}
    rack = np.array([where[n] for n in nodes])
    i, j = np.triu_indices(len(nodes), 1)  # the matrix's pair order
    same = rack[i] == rack[j]
    latency = np.where(same, lat[0], lat[1]) * np.exp(rng.normal(0, noise, len(i)))
    busbw = np.where(same, bw[0], bw[1]) * np.exp(rng.normal(0, noise, len(i)))
    return nodes, label, latency, busbw


def racks_of(label):
    out = {}
    for node, rack in label.items():
        out.setdefault(rack, []).append(node)
    return sorted(out.values())


@pytest.mark.parametrize("racks", [[4, 4], [3, 3, 3]])
def test_it_finds_the_racks_with_every_node_sure(racks):
    nodes, label, lat, bw = bed(racks)
    found = ti.infer(nodes, lat, bw)
    assert found.answer == ti.GROUPS
    assert sorted(found.groups) == racks_of(label)
    assert min(found.confidence.values()) >= ti.MIN_CONFIDENCE
    report = ti.report(found, label, sweep=7)
    assert [g["name"] for g in report["groups"]] == [f"rack-{r + 1}" for r in range(len(racks))]
    assert report["mismatches"] == [] and report["uplinks"] == [] and report["sweep"] == 7


def test_bandwidth_alone_groups_when_every_latency_agrees():
    nodes, label, lat, bw = bed([3, 3], lat=(50.0, 50.0))
    found = ti.infer(nodes, lat, bw)
    assert found.answer == ti.GROUPS and sorted(found.groups) == racks_of(label)


def test_noisy_racks_are_still_found():
    nodes, label, lat, bw = bed([4, 4], noise=0.3, seed=3)
    found = ti.infer(nodes, lat, bw)
    assert found.answer == ti.GROUPS and sorted(found.groups) == racks_of(label)


def test_a_moved_node_is_named_with_both_figures():
    nodes, label, lat, bw = bed([4, 4], moved={"gpu-004": "rack-2"})
    found = ti.infer(nodes, lat, bw)
    assert sorted(found.groups) == [["gpu-001", "gpu-002", "gpu-003"], ["gpu-004", *nodes[4:]]]
    report = ti.report(found, label)
    assert [g["name"] for g in report["groups"]] == ["rack-1", "rack-2"]
    (wrong,) = report["mismatches"]
    assert (wrong["node"], wrong["declared"], wrong["measured"]) == ("gpu-004", "rack-1", "rack-2")
    assert wrong["text"].startswith("gpu-004 is labelled rack-1 but measures with rack-2: 1")
    assert " us, " in wrong["text"] and " vs 4" in wrong["text"]
    (f,) = ti.mismatch_findings(report["mismatches"])
    assert (f["severity"], f["code"], f["subject"]) == ("warn", "topology_mismatch", "gpu-004")


@pytest.mark.parametrize("size, seed", [(6, 0), (8, 1), (9, 2), (16, 3)])
def test_no_structure_is_one_group_and_names_nobody(size, seed):
    nodes, label, lat, bw = bed([size], noise=0.1, seed=seed)
    label = {n: ("rack-a" if i % 2 else "rack-b") for i, n in enumerate(nodes)}  # labels that mean nothing
    found = ti.infer(nodes, lat, bw)
    assert found.answer == ti.ONE_GROUP and found.groups == [nodes]
    assert set(found.confidence.values()) == {None}
    assert ti.report(found, label)["mismatches"] == []


def test_spread_close_to_the_gap_is_low_confidence_and_names_nobody():
    # 10 against 6 GB/s across, latency alike, each figure 20 % noisy: the gap is a few spreads wide
    nodes, label, lat, bw = bed([4, 4], moved={"gpu-004": "rack-2"}, noise=0.2, seed=5, lat=(50, 50), bw=(10, 6))
    found = ti.infer(nodes, lat, bw)
    assert found.answer in (ti.LOW_CONFIDENCE, ti.ONE_GROUP)
    assert ti.report(found, label)["mismatches"] == []


def test_failed_pairs_neither_join_nor_split_and_a_silent_node_is_unplaced():
    nodes, label, lat, bw = bed([4, 4])
    n = len(nodes)
    for i in range(n):
        for j in range(i + 1, n):
            k = i * (2 * n - i - 1) // 2 + (j - i - 1)
            if "gpu-008" in (nodes[i], nodes[j]) or (i, j) == (0, 5):
                lat[k] = bw[k] = np.nan
    found = ti.infer(nodes, lat, bw)
    assert found.unplaced == ["gpu-008"]
    assert sorted(found.groups) == [nodes[:4], nodes[4:7]]


def test_it_needs_three_measured_nodes():
    with pytest.raises(ti.InferenceError, match="at least 3"):
        ti.infer(["a", "b"], np.array([10.0]), np.array([1.0]))
    with pytest.raises(ti.InferenceError, match="measured a latency or a bandwidth"):
        ti.infer(["a", "b", "c"], np.full(3, np.nan), np.full(3, np.nan))


def test_a_fleet_of_1024_nodes_is_grouped_and_the_moved_node_named():
    nodes, label, lat, bw = bed([16] * 64, moved={"gpu-017": "rack-9"}, noise=0.1)
    found = ti.infer(nodes, lat, bw)
    assert found.answer == ti.GROUPS and len(found.groups) == 64
    assert [m["node"] for m in ti.report(found, label)["mismatches"]] == ["gpu-017"]


def test_pairs_read_into_the_condensed_arrays_in_matrix_order():
    lat, bw = ti.from_pairs(
        ["a", "b", "c"],
        [{"a": "c", "b": "a", "latency_us": 5.0, "busbw_gbps": 2.0}, {"a": "b", "b": "c", "latency_us": None}],
    )
    assert lat[1] == 5.0 and bw[1] == 2.0 and np.isnan(lat[0]) and np.isnan(lat[2]) and np.isnan(bw[2])


def test_a_figure_as_noisy_as_the_gap_does_not_hide_the_others_racks():
    # The bed's case: latency on a loaded host jitters many-fold, busbw across the uplink is 40 times lower;
    # the two summed would be "low confidence".
    nodes, label, lat, bw = bed(
        [3, 3], moved={"gpu-003": "rack-2"}, noise=0.1, seed=4, lat=(300, 300), bw=(0.26, 0.006)
    )
    lat = lat * np.exp(np.random.default_rng(9).normal(0, 1.2, len(lat)))
    found = ti.infer(nodes, lat, bw)
    assert found.answer == ti.GROUPS and found.metrics == ["busbw_gbps"]
    assert [m["node"] for m in ti.report(found, label)["mismatches"]] == ["gpu-003"]


def uplink_pairs(windows):
    """Group a (a1..a3) sends across to b1..b3 in round 9; a's inside pairs in round 1 measure 0.2 GB/s."""
    pairs = [{"round": 1, "a": f"a{i}", "b": f"a{j}", "busbw_gbps": 0.2} for i, j in ((1, 2), (1, 3), (2, 3))]
    for k, window in enumerate(windows, 1):
        pairs.append({"round": 9, "a": f"a{k}", "b": f"b{k}", "busbw_gbps": 0.004, "window": window})
    return pairs


def test_an_uplink_is_what_its_round_of_pairs_sums_to_when_they_measured_at_once():
    groups = {"a": ["a1", "a2", "a3"], "b": ["b1", "b2", "b3"]}
    (up,) = ti.uplink_figures(groups, {9: "a"}, uplink_pairs([(10.0, 13.3), (10.1, 13.4), (10.2, 13.2)]))
    assert (up["group"], up["nodes"], up["senders"], up["pairs"]) == ("a", 3, 3, 3)
    assert up["gbps"] == pytest.approx(0.012) and up["mbit"] == pytest.approx(96.0)
    assert up["inside_gbps"] == pytest.approx(0.2) and up["oversubscription"] == pytest.approx(50.0)
    assert up["overlap"] == pytest.approx(3.0 / 3.2, abs=1e-3) and up["concurrent"] is True


def test_an_uplink_round_whose_pairs_ran_one_after_another_is_not_called_concurrent():
    groups = {"a": ["a1", "a2", "a3"], "b": ["b1", "b2", "b3"]}
    staggered = uplink_pairs([(10.0, 13.0), (12.0, 15.0), (14.5, 17.5)])
    (up,) = ti.uplink_figures(groups, {9: "a"}, staggered)
    assert up["overlap"] == 0.0 and up["concurrent"] is False
    (unknown,) = ti.uplink_figures(groups, {9: "a"}, uplink_pairs([None, None, None]))
    assert unknown["overlap"] is None and unknown["concurrent"] is None  # no window: not said either way


def test_an_uplink_round_that_measured_nothing_has_no_figure():
    failed = [{"round": 9, "a": "a1", "b": "b1", "busbw_gbps": None}]
    (up,) = ti.uplink_figures({"a": ["a1"], "b": ["b1"]}, {9: "a"}, failed)
    assert (up["senders"], up["pairs"], up["gbps"], up["oversubscription"]) == (0, 1, None, None)
