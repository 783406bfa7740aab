"""Culprit inference over a whole matrix (cluster_health.core.culprits): pure, no database."""

from itertools import combinations

import pytest

from cluster_health.core import culprits, evidence
from tests.support.six_hosts import SIX, six_host_pairs


def pair(a, b, status="ok", stage="bandwidth", reason=None, busbw=1.0, evidence=None):
    return {
        "a": a,
        "b": b,
        "status": status,
        "stage": stage,
        "reason": reason,
        "busbw_gbps": busbw,
        "sizes": [{"bytes": 1 << 20, "busbw_gbps": busbw}] if busbw else [],
        "evidence": evidence,
    }


def matrix(nodes, bad=lambda a, b: None, busbw=lambda a, b: 1.0):
    """Every pair of ``nodes`` in planner order (a before b); bad(a, b) gives (status, stage, reason) or None."""
    out = []
    for a, b in combinations(nodes, 2):
        why = bad(a, b)
        out.append(pair(a, b, *why, busbw=None) if why else pair(a, b, busbw=busbw(a, b)))
    return out


NODES = ["n1", "n2", "n3", "n4"]
CONNECT_TIMEOUT = ("timeout", "connect", "connect_timeout")


def codes(found):
    return [(f["code"], f["subject"]) for f in found]


def on_n2(hosting, dialling=None):
    """bad(a, b) for matrix(): ``hosting`` for n2's pairs with n3 and n4 (n2 is rank 0 there, hosting the
    store), ``dialling`` for its pair with n1 (n2 connects out)."""
    return lambda a, b: hosting if a == "n2" else dialling if b == "n2" else None


def inbound_blocked(pairs):
    return [f for f in culprits.infer(NODES, pairs) if f["code"] == "inbound_blocked"]


def test_it_blames_a_node_that_accepts_no_inbound_connection():
    # n2 hosts the store for n3 and n4 (it is rank 0 there), and connects out to n1.
    pairs = matrix(NODES, on_n2(CONNECT_TIMEOUT))
    found = culprits.infer(NODES, pairs)
    assert codes(found) == [("inbound_blocked", "n2")]
    f = found[0]
    assert sorted(f["pairs"]) == ["n2<->n3", "n2<->n4"]
    assert "n2 accepts no inbound connection from any peer" in f["text"] and "connects out fine (to n1)" in f["text"]
    assert "open its firewall for the store port and Gloo's ephemeral range" in f["text"]
    assert culprits.explained_pairs(found) == {"n2<->n3", "n2<->n4"}


def test_it_does_not_call_a_node_inbound_blocked_when_its_outbound_connections_fail_too():
    pairs = matrix(NODES, lambda a, b: CONNECT_TIMEOUT if "n2" in (a, b) else None)
    assert not inbound_blocked(pairs)


def test_a_later_transport_failure_where_the_node_connected_out_still_supports_it():
    transport = ("timeout", "init", "transport")  # Gloo dialled into n2
    f = inbound_blocked(matrix(NODES, on_n2(CONNECT_TIMEOUT, transport)))[0]
    assert sorted(f["pairs"]) == ["n1<->n2", "n2<->n3", "n2<->n4"]


STORE_TIMEOUT = ("timeout", "store", "store_timeout")


def test_a_master_that_never_published_its_port_is_not_called_inbound_blocked():
    # n2's peers waited for its store port and never dialled: nothing says a connection into n2 failed.
    pairs = matrix(NODES, on_n2(STORE_TIMEOUT))
    # What the halves say: n2 (rank 0) listened and no peer arrived; the peers never reached the store step.
    for p in pairs:
        if p["a"] == "n2":
            p["evidence"] = evidence.pair_evidence(
                {"node": "n2", "evidence": {"store": {"role": "listen", "connected": False}}},
                {"node": p["b"], "evidence": {"interface": "eth0"}},
            )
            assert p["evidence"]["connections"] == [], p["evidence"]
    assert not inbound_blocked(pairs)


def test_a_pair_where_the_node_never_dialled_out_does_not_count_as_connecting_out():
    # n2 accepts nothing from n3 and n4, and its pair with n1 stopped before n2 dialled (n1 never
    # published): its outbound connections are unknown, so the direction finding waits for evidence.
    assert not inbound_blocked(matrix(NODES, on_n2(CONNECT_TIMEOUT, STORE_TIMEOUT)))


def test_it_names_a_segment_when_every_crossing_pair_fails_and_each_group_works_inside():
    nodes = ["rack1-n1", "rack1-n2", "rack2-n1", "rack2-n2"]
    pairs = matrix(nodes, lambda a, b: CONNECT_TIMEOUT if a[:5] != b[:5] else None)
    found = culprits.infer(nodes, pairs)
    assert codes(found) == [("segment", "rack1<->rack2")]
    assert len(found[0]["pairs"]) == 4 and "every pair between rack1 and rack2 fails (4 of 4" in found[0]["text"]


def test_it_says_the_groups_of_a_segment_came_from_the_hostname_pattern():
    nodes = ["rack1-n1", "rack1-n2", "rack2-n1", "rack2-n2"]
    found = culprits.infer(nodes, matrix(nodes, lambda a, b: CONNECT_TIMEOUT if a[:5] != b[:5] else None))
    assert "groups from the hostname pattern" in found[0]["text"]
    assert found[0]["detail"]["evidence"][0] == "groups from the hostname pattern"


# Names that no hostname pattern groups the way the racks are cabled.
DECLARED = {"alpha": "row7:leaf-a", "zulu": "row7:leaf-a", "mike": "row7:leaf-b", "kilo": "row7:leaf-b"}


def test_it_blames_a_failing_segment_between_declared_groups_whose_names_follow_no_pattern():
    nodes = sorted(DECLARED)
    pairs = matrix(nodes, lambda a, b: CONNECT_TIMEOUT if DECLARED[a] != DECLARED[b] else None)
    assert not culprits.segments(pairs)  # the hostname pattern alone sees no groups here
    found = culprits.infer(nodes, pairs, declared=DECLARED)
    assert codes(found) == [("segment", "row7:leaf-a<->row7:leaf-b")]
    f = found[0]
    assert sorted(f["pairs"]) == ["alpha<->kilo", "alpha<->mike", "kilo<->zulu", "mike<->zulu"]
    assert "every pair between row7:leaf-a and row7:leaf-b fails (4 of 4" in f["text"]
    assert "groups from the declared topology" in f["text"]
    assert f["detail"]["evidence"][0] == "groups from the declared topology"
    assert culprits.explained_pairs(found) == set(f["pairs"])


def assert_one_segment(found: list[dict], subject: str, sources: str) -> None:
    """One finding, the segment ``subject``, saying where its groups came from."""
    assert codes(found) == [("segment", subject)]
    assert sources in found[0]["text"], found[0]["text"]


def test_it_names_a_slow_segment_between_declared_groups():
    nodes = sorted(DECLARED)
    pairs = matrix(nodes, busbw=lambda a, b: 0.1 if DECLARED[a] != DECLARED[b] else 1.0)
    assert_one_segment(
        culprits.infer(nodes, pairs, declared=DECLARED), "row7:leaf-a<->row7:leaf-b", "declared topology"
    )


def test_with_three_racks_a_slow_segment_is_slow_next_to_the_other_paths_across_not_only_the_racks():
    # Every uplink oversubscribed alike (links across at 1 % of inside): the fabric's design, no segment. One
    # uplink ten times slower than the other two: that one.
    racks = {f"host{i}": f"rack{(i - 1) // 3 + 1}" for i in range(1, 10)}
    nodes = sorted(racks)

    def speed(slow_pair=None):
        def bw(a, b):
            if racks[a] == racks[b]:
                return 0.685
            return 0.00046 if {racks[a], racks[b]} == slow_pair else 0.0046

        return bw

    assert codes(culprits.infer(nodes, matrix(nodes, busbw=speed()), declared=racks)) == []
    found = culprits.infer(nodes, matrix(nodes, busbw=speed({"rack1", "rack3"})), declared=racks)
    assert codes(found) == [("segment", "rack1<->rack3")]


def test_a_declared_group_wins_over_the_pattern_and_undeclared_nodes_fall_back_to_it():
    # r1-a sits in rack r2 whatever its name says; r9-* declare nothing and group by their names.
    declared = {"r1-a": "r2", "r2-a": "r2", "r2-b": "r2"}
    assert culprits.node_groups(["r1-a", "r9-a"], declared=declared) == {
        "r1-a": ("r2", "declared topology"),
        "r9-a": ("r9", "hostname pattern"),
    }
    nodes = ["r1-a", "r2-a", "r2-b", "r9-a", "r9-b"]
    rack = {n: declared.get(n, "r9") for n in nodes}
    pairs = matrix(nodes, lambda a, b: CONNECT_TIMEOUT if rack[a] != rack[b] else None)
    found = culprits.infer(nodes, pairs, declared=declared)
    assert_one_segment(found, "r2<->r9", "r2 from the declared topology, r9 from the hostname pattern")


def test_no_segment_without_groups_or_when_a_group_is_broken_inside():
    assert not culprits.segments(matrix(NODES, lambda a, b: CONNECT_TIMEOUT))
    nodes = ["rack1-n1", "rack1-n2", "rack2-n1", "rack2-n2"]
    broken_inside = matrix(nodes, lambda a, b: CONNECT_TIMEOUT if a[:5] != b[:5] or "rack2-n1" in (a, b) else None)
    assert not culprits.segments(broken_inside)


def test_a_node_is_the_common_factor_of_scattered_failures():
    pairs = matrix(
        NODES, lambda a, b: ("failed", "init", "transport") if (a, b) in (("n1", "n3"), ("n3", "n4")) else None
    )
    assert codes(culprits.infer(NODES, pairs)) == [("node_common_factor", "n3")]


def test_a_single_failing_link_is_left_to_the_link_rule():
    pairs = matrix(NODES, lambda a, b: CONNECT_TIMEOUT if (a, b) == ("n1", "n3") else None)
    assert culprits.infer(NODES, pairs) == []


def test_a_node_slow_with_every_peer_is_named_on_a_first_sweep():
    pairs = matrix(NODES, busbw=lambda a, b: 0.025 if "n1" in (a, b) else 1.1)
    found = culprits.infer(NODES, pairs)
    assert codes(found) == [("slow_node", "n1")]
    assert "every link of n1 is slow next to its peers" in found[0]["text"] and "0.02 x" in found[0]["text"]


def test_a_slow_node_among_scattered_links_of_a_loaded_bed_is_still_named():
    # Figures from a loaded 4-host bed: the unshaped links scatter, the shaped node's are all below them.
    nodes = ["r1-n1", "r1-n2", "r2-n1", "r2-n2"]
    speeds = {("r1-n2", "r2-n2"): 0.2573, ("r2-n1", "r2-n2"): 0.1697, ("r1-n2", "r2-n1"): 0.031}
    pairs = matrix(nodes, busbw=lambda a, b: 0.0239 if "r1-n1" in (a, b) else speeds[(a, b)])
    assert ("slow_node", "r1-n1") in codes(culprits.infer(nodes, pairs))


# Busbw (GB/s) of the six links of four healthy nodes: nothing in either is an outlier.
HEALTHY_SCATTER = {
    # a spread of 0.6 to 1.4
    "scatter": [0.7, 1.3, 0.9, 1.1, 0.6, 1.4],
    # a healthy full sweep on a loaded 2-core machine, at 64 KiB: a 20x spread
    "loaded host": [0.0049, 0.022, 0.0903, 0.1016, 0.0435, 0.0169],
}


@pytest.mark.parametrize("case", HEALTHY_SCATTER)
def test_healthy_scatter_names_no_outlier_and_no_slow_link(case):
    links = [("n1", "n2"), ("n1", "n3"), ("n1", "n4"), ("n2", "n3"), ("n2", "n4"), ("n3", "n4")]
    seen = dict(zip(links, HEALTHY_SCATTER[case]))
    assert culprits.infer(NODES, matrix(NODES, busbw=lambda a, b: seen[(a, b)])) == []


def test_links_measured_only_at_small_sizes_are_not_compared():
    # At 64 KiB an all_reduce measures latency and scheduling: a loaded loopback scatters 8x.
    pairs = matrix(NODES, busbw=lambda a, b: 0.0126 if "n1" in (a, b) else 0.1)
    for p in pairs:
        p["sizes"] = [{"bytes": 64 << 10, "busbw_gbps": p["busbw_gbps"]}]
    assert codes(culprits.infer(NODES, pairs)) == []


def test_a_single_slow_link_and_a_slow_segment():
    pairs = matrix(NODES, busbw=lambda a, b: 0.1 if (a, b) == ("n2", "n3") else 1.0)
    assert codes(culprits.infer(NODES, pairs)) == [("slow_link", "n2<->n3")]
    nodes = ["r1-a", "r1-b", "r2-a", "r2-b"]
    pairs = matrix(nodes, busbw=lambda a, b: 0.1 if a[:2] != b[:2] else 1.0)
    assert codes(culprits.infer(nodes, pairs)) == [("segment", "r1<->r2")]


def test_a_lone_link_between_declared_groups_has_no_peer_of_its_kind():
    # A topology sweep probes inside each measured group and one pair across: that pair runs at the uplink's
    # speed, a third of the links inside, and is no slow link (a path through an uplink is not a rack's).
    racks = {f"r{r}-n{i}": f"m{r}" for r in (1, 2) for i in range(1, 5)}
    nodes = sorted(racks)
    pairs = [p for p in matrix(nodes) if racks[p["a"]] == racks[p["b"]]] + [pair("r1-n4", "r2-n1", busbw=0.3)]
    assert codes(culprits.infer(nodes, pairs, declared=racks)) == []
    # Without the groups the same figure stands against the racks' links, and is slow.
    assert codes(culprits.infer(nodes, pairs)) == [("slow_link", "r1-n4<->r2-n1")]


def test_a_node_cabled_to_another_rack_than_its_label_is_no_slow_node_and_a_shaped_one_is_slow_in_every_kind():
    # r1-n3 is labelled m1 but cabled into rack 2: its two links to its labelled rack-mates cross an uplink (slow
    # next to the links inside), its links to rack 2 are fast. That is a topology mismatch (its own finding),
    # not a slow node, which the confirmation pass could confirm and drain.
    labels = {f"r{r}-n{i}": f"m{r}" for r in (1, 2, 3) for i in (1, 2, 3)}
    cabled = {**labels, "r1-n3": "m2"}
    nodes = sorted(labels)
    pairs = matrix(nodes, busbw=lambda a, b: 0.5 if cabled[a] == cabled[b] else 0.005)
    assert "slow_node" not in [c for c, _ in codes(culprits.infer(nodes, pairs, declared=labels))]
    # A node shaped slow is slow in both kinds: named once, with every one of its links behind it.
    pairs = matrix(nodes, busbw=lambda a, b: 0.02 if "r2-n2" in (a, b) else (0.5 if labels[a] == labels[b] else 0.3))
    found = [f for f in culprits.infer(nodes, pairs, declared=labels) if f["code"] == "slow_node"]
    assert [f["subject"] for f in found] == ["r2-n2"] and len(found[0]["pairs"]) == 8


def test_a_slow_link_among_links_across_declared_groups_is_held_against_them():
    # The crossing links at 0.55 GB/s (no slow segment: not all under half the racks' 1.0) but one at 0.05.
    racks = {f"r{r}-n{i}": f"m{r}" for r in (1, 2) for i in range(1, 4)}
    nodes = sorted(racks)
    pairs = matrix(
        nodes,
        busbw=lambda a, b: 1.0 if racks[a] == racks[b] else (0.05 if (a, b) == ("r1-n1", "r2-n2") else 0.55),
    )
    assert codes(culprits.infer(nodes, pairs, declared=racks)) == [("slow_link", "r1-n1<->r2-n2")]


def test_a_node_is_held_against_the_links_of_each_kind_and_its_lone_link_across_is_no_part_of_it():
    # A topology sweep on a loaded 3 x 3 bed: r2-n3's two links inside ran at a busy moment (0.15 against 0.38),
    # and its one link across at the uplink's 0.0058 GB/s like the other pairs across. The node finding names its
    # links inside only: the pair across is not slow, and the confirmation rules judge the node by its own kind.
    racks = {f"r{r}-n{i}": f"m{r}" for r in (1, 2, 3) for i in (1, 2, 3)}
    nodes = sorted(racks)
    inside = [
        pair(a, b, busbw=0.15 if "r2-n3" in (a, b) else 0.38) for a, b in combinations(nodes, 2) if racks[a] == racks[b]
    ]
    across = [
        pair("r1-n3", "r2-n1", busbw=0.0049),
        pair("r2-n3", "r3-n1", busbw=0.0058),
        pair("r1-n1", "r3-n2", busbw=0.0051),
    ]
    found = culprits.infer(nodes, inside + across, declared=racks)
    assert codes(found) == [("slow_node", "r2-n3")]
    assert found[0]["pairs"] == ["r2-n1<->r2-n3", "r2-n2<->r2-n3"]
    assert (
        codes(culprits.infer(nodes, [p for p in inside if "r2-n3" not in (p["a"], p["b"])] + across, declared=racks))
        == []
    )


def test_a_slow_node_taken_out_leaves_no_segment_to_judge_against_one_link():
    # rack1-n1 is slow; without it, rack1-n2's two links across (a loaded host's half speed) stand against the
    # single link inside rack2: no spread to judge by, so no slow segment, and those links stay ok.
    nodes = ["rack1-n1", "rack1-n2", "rack2-n1", "rack2-n2"]
    speed = {("rack1-n2", "rack2-n1"): 1.1, ("rack1-n2", "rack2-n2"): 1.2, ("rack2-n1", "rack2-n2"): 2.6}
    pairs = matrix(nodes, busbw=lambda a, b: 0.2 if "rack1-n1" in (a, b) else speed[(a, b)])
    assert codes(culprits.infer(nodes, pairs)) == [("slow_node", "rack1-n1")]
    # Two links inside (rack1-n2 not taken out) are enough to call the links across slow.
    pairs = matrix(nodes, busbw=lambda a, b: 1.0 if a[:5] != b[:5] else 2.6)
    assert codes(culprits.infer(nodes, pairs)) == [("segment", "rack1<->rack2")]


def test_a_slow_node_is_named_when_links_without_it_came_out_transient():
    # host1 shaped; two of the three links without it were slow once under load and fine when the
    # confirmation pass probed them again: they still count among its peers, at their second look.
    def again(bw):
        return {"confirmation": {"outcome": "transient", "again": {"status": "ok", "busbw_gbps": bw}}}

    nodes = ["host1", "host2", "host3", "host4"]
    pairs = [pair("host1", n, "degraded", reason="below_baseline", busbw=0.024) for n in nodes[1:]]
    pairs += [
        pair("host2", "host3", "transient", reason="below_baseline", busbw=0.2, evidence=again(0.41)),
        pair("host2", "host4", "transient", reason="below_baseline", busbw=0.19, evidence=again(0.39)),
        pair("host3", "host4", busbw=0.4),
    ]
    found = culprits.infer(nodes, pairs)
    assert codes(found) == [("slow_node", "host1")]
    said = found[0]["text"]
    assert "its 3 measured links at median busbw 0.024 GB/s, 0.06 x the 0.4 GB/s of the 3 links without it" in said, (
        said
    )
    # The evidence: each of its links, then the one line of what they were compared with.
    assert found[0]["detail"]["evidence"][-1] == "compared with the 3 links without host1: median 0.4 GB/s"
    assert len(found[0]["detail"]["evidence"]) == len(found[0]["pairs"]) + 1 == 4


def test_a_node_too_slow_to_reach_the_large_sizes_is_still_compared_at_them():
    # rack1-n1 shaped and beside a bulk transfer: its pairs got no further than 64 KiB in their time, at
    # 0.4 MB/s, while the other half of the pairs reached 1 MiB. The comparison stays at 1 MiB (each slow
    # pair at its own largest size), not at 64 KiB, where nothing is compared.
    nodes = ["rack1-n1", "rack1-n2", "rack2-n1", "rack2-n2"]
    pairs = []
    for p in matrix(nodes, busbw=lambda a, b: 0.0004 if "rack1-n1" in (a, b) else 0.4):
        p["sizes"] = [{"bytes": 64 << 10, "busbw_gbps": p["busbw_gbps"] / 4}]
        if "rack1-n1" not in (p["a"], p["b"]):
            p["sizes"].append({"bytes": 1 << 20, "busbw_gbps": p["busbw_gbps"]})
        pairs.append(p)
    assert codes(culprits.infer(nodes, pairs)) == [("slow_node", "rack1-n1")]


def test_a_node_retransmitting_with_every_peer_is_lossy():
    def ev(a, b, pct_a):
        side = lambda n, pct: {"node": n, "tcp": {"OutSegs": 1000, "RetransSegs": int(pct * 10), "retrans_pct": pct}}
        return {"a": side(a, pct_a if a == "n3" else 0.0), "b": side(b, 4.1 if b == "n3" else 0.0), "connections": []}

    pairs = [pair(a, b, evidence=ev(a, b, 4.1)) for a, b in combinations(NODES, 2)]
    found = culprits.infer(NODES, pairs)
    assert codes(found) == [("lossy", "n3")]
    assert found[0]["text"].startswith("n3 retransmitted 4.1 % of segments with every peer")
    assert "check its cable or optic" in found[0]["text"]
    # Random loss spares one probe now and then: most of its peers still name it.
    spared = [pair(a, b, evidence=ev(a, b, 0.2 if b == "n4" else 4.1)) for a, b in combinations(NODES, 2)]
    found = culprits.infer(NODES, spared)
    assert codes(found) == [("lossy", "n3")]
    assert found[0]["text"].startswith("n3 retransmitted 4.1 % of segments with 2 of its 3 peers")
    # Loss on most links is the fabric's, not one node's.
    everywhere = [pair(a, b, evidence=ev(a, b, 4.1)) for a, b in combinations(NODES, 2)]
    for p in everywhere:
        p["evidence"]["a"]["tcp"]["retrans_pct"] = 3.0
    assert "lossy" not in [c for c, _ in codes(culprits.infer(NODES, everywhere))]


def test_groups_from_names():
    assert culprits.group_of("rack1-n3") == "rack1"
    assert culprits.group_of("gpu-07") == "gpu"
    assert culprits.group_of("host12") == "host"
    assert culprits.group_of("node_a.leaf2", r"^.*\.(leaf\d+)$") == "leaf2"


def test_flapping_and_drift_from_a_links_history():
    from cluster_health.core import history

    assert history.flapping(["ok", "timeout", "ok", "ok", "timeout", "ok"])
    assert not history.flapping(["ok", "ok", "timeout", "timeout"])  # failed and stayed failed: not flapping
    assert not history.flapping(["ok"] * 6 + ["timeout"])
    found = history.link_findings("a<->b", ["ok"] * 7, [1.0, 1.02, 0.98, 0.95, 0.9, 0.86, 0.8])
    assert [f["code"] for f in found] == ["drift"] and "fell from 1 to 0.8 GB/s" in found[0]["text"]
    assert history.link_findings("a<->b", ["ok"] * 7, [1.0, 0.9, 1.1, 0.95, 1.05, 0.92, 1.08]) == []


@pytest.mark.parametrize("seed", range(40))
def test_a_reference_less_some_values_has_the_median_spread_and_minimum_of_the_values_left(seed):
    import random
    import statistics

    rng = random.Random(seed)
    values = [round(rng.lognormvariate(1, 0.6), rng.choice((1, 3, 6))) for _ in range(rng.randint(3, 60))]
    if seed % 5 == 0:
        values += [values[0]] * 7  # ties, and runs of one value
    removed = rng.sample(values, rng.randint(0, len(values) - 2))
    left = list(values)
    for v in removed:
        left.remove(v)
    ref = culprits.Reference(values).without(removed)
    mid = statistics.median(left)
    mad = statistics.median(abs(x - mid) for x in left)
    assert ref.count == len(left) and ref.minimum == min(left) and ref.median == mid
    assert ref.spread == pytest.approx(culprits.MAD_TO_SIGMA * mad, rel=1e-9, abs=1e-12)
    for value in (mid - 5 * ref.spread, mid - 3 * ref.spread, min(left) * 0.5):
        old = ref.spread == 0 or (mid - value) / (culprits.MAD_TO_SIGMA * mad) > culprits.OUTLIER_Z
        assert ref.far_below(value) == old


def test_the_outlier_rules_read_a_1024_node_sweep_and_name_its_slow_node():
    """523,776 links, one node slow. Each node's links are compared with all the others without copying them
    per node: the rules were quadratic in the links (about ten hours at 1,024 nodes), now a few seconds."""
    names = [f"n{i:04d}" for i in range(1024)]
    pairs = []
    for i, a in enumerate(names):
        for j in range(i + 1, len(names)):
            b = names[j]
            bw = 1.0 if 500 in (i, j) else 10.0 + (i * 31 + j) % 100 / 100
            sizes = [{"bytes": 1 << 24, "busbw_gbps": bw}]
            pairs.append({"a": a, "b": b, "status": "ok", "busbw_gbps": bw, "sizes": sizes})
    found = culprits.outliers(pairs)
    assert [(f["code"], f["subject"]) for f in found] == [("slow_node", "n0500")]


def test_an_offline_node_owns_its_pairs_and_a_firewalled_pair_is_a_link():
    found = culprits.infer(SIX, six_host_pairs(), offline={"host5"})
    assert codes(found) == [("slow_node", "host3")]
    assert not [f for f in found if f["subject"] == "host2"]


def test_without_knowing_the_node_is_offline_its_timeouts_made_a_healthy_peer_the_common_factor():
    # What the rule said before it was told which nodes were offline: the wrong culprit the page showed.
    assert ("node_common_factor", "host2") in codes(culprits.infer(SIX, six_host_pairs()))


def test_a_segment_is_still_a_segment_when_a_node_in_it_is_offline():
    nodes = ["rack1-n1", "rack1-n2", "rack2-n1", "rack2-n2"]

    def bad(a, b):
        if "rack2-n2" in (a, b):
            return ("offline", None, "agent_offline")
        return CONNECT_TIMEOUT if a[:5] != b[:5] else None

    found = culprits.infer(nodes, matrix(nodes, bad), offline={"rack2-n2"})
    assert codes(found) == [("segment", "rack1<->rack2")]
    assert sorted(found[0]["pairs"]) == ["rack1-n1<->rack2-n1", "rack1-n2<->rack2-n1"]
