"""Every figure judged with the load it was measured under: peers first, history at comparable load."""

from __future__ import annotations

import itertools

from agents import evidence as agent_evidence
from cluster_health.core import confirmation, judging, verdicts
from tests.core.test_culprits import pair as matrix_pair

RATIO = 0.9  # CLUSTER_HEALTH_DEGRADED_RATIO's default
NODES = [f"n{i}" for i in range(6)]


def side(node, pressure=None, cold=False, iface="eth0"):
    load = {"seconds": 2.0, "own_bytes": 1_000_000, "nic_bytes": 1_000_000}
    if pressure is not None:
        load["cpu_pressure"] = pressure
    if cold:
        load["cold"] = True
    return {"node": node, "interface": iface, "load": load}


def measured(a, b, bw, usual=1.0, mad=0.02, samples=6, pressure=(None, None), status="ok", reason=None):
    ev = {
        "a": side(a, pressure[0]),
        "b": side(b, pressure[1]),
        "expected": {"busbw_gbps": usual, "mad_gbps": mad, "samples": samples, "load": 0.05},
    }
    return {
        "a": a,
        "b": b,
        "status": status,
        "reason": reason,
        "hint": "below its band",
        "busbw_gbps": bw,
        "evidence": ev,
    }


def fleet(bw_of, pressure_of=lambda n: None):
    """Every pair of NODES at ``bw_of(a, b)`` of a 1 GB/s history; below the band (0.8) marked as closing does."""
    out = []
    for a, b in itertools.combinations(NODES, 2):
        bw = bw_of(a, b)
        slow = bw < 0.8
        out.append(
            measured(
                a,
                b,
                bw,
                pressure=(pressure_of(a), pressure_of(b)),
                status="degraded" if slow else "ok",
                reason="below_baseline" if slow else None,
            )
        )
    return out


def test_a_sweep_slow_everywhere_under_load_calls_no_link_slow():
    # Two busy loops beside the bed: every link runs at 0.55-0.7 of its quiet history, every node under pressure.
    scatter = {p: 0.55 + 0.03 * (i % 6) for i, p in enumerate(itertools.combinations(NODES, 2))}
    pairs = fleet(lambda a, b: scatter[(a, b)], lambda n: 0.8)
    updates = judging.against_peers(pairs, RATIO)
    below = [p for p in pairs if p["status"] == "degraded"]
    assert below and set(updates) == {(p["a"], p["b"]) for p in below}
    assert {u["status"] for u in updates.values()} == {"contended"}
    hint = next(iter(updates.values()))["hint"]
    assert "its peers slowed alike" in hint and "contended, not acted on" in hint
    assert "CPU pressure 80% during the probe" in hint, hint


def test_a_sweep_slow_everywhere_on_quiet_nodes_is_ok_and_said_once():
    pairs = fleet(lambda a, b: 0.6, lambda n: 0.02)
    updates = judging.against_peers(pairs, RATIO)
    assert {u["status"] for u in updates.values()} == {"ok"}
    for p in pairs:
        p.update({k: v for k, v in updates[(p["a"], p["b"])].items() if k != "judged"})
    [told] = judging.sweep_slow(pairs)
    assert told["severity"] == "info" and "60% of their own history" in told["text"]
    assert verdicts.verdict([p["status"] for p in pairs], [told]) == "pass"


def test_a_shaped_node_on_a_busy_bed_is_still_slow():
    # Every node equally busy: load explains nothing. n3 is shaped to a fifth of its history.
    pairs = fleet(lambda a, b: 0.2 if "n3" in (a, b) else 0.65, lambda n: 0.85)
    updates = judging.against_peers(pairs, RATIO)
    for k, u in updates.items():
        if "n3" in k:
            assert "status" not in u and "slow next to its peers too" in u["hint"], u
            assert u["judged"]["ratio"] == 0.2 and u["judged"]["peers_ratio"] == 0.65
        else:
            assert u["status"] == "contended"  # below its quiet history, like its peers


def test_a_node_busy_alone_is_contended_with_its_figure():
    pairs = fleet(lambda a, b: 0.4 if "n3" in (a, b) else 0.95, lambda n: 0.75 if n == "n3" else 0.05)
    updates = judging.against_peers(pairs, RATIO)
    assert {k for k in updates} == {k for k in updates if "n3" in k} and len(updates) == 5
    for u in updates.values():
        assert u["status"] == "contended" and "n3: CPU pressure 75% during the probe" in u["hint"], u
        assert "only it was busy" in u["hint"]


def test_a_slow_link_on_quiet_nodes_stays_degraded_whatever_its_history_says():
    pairs = fleet(lambda a, b: 0.3 if (a, b) == ("n1", "n4") else 0.97)
    updates = judging.against_peers(pairs, RATIO)
    assert list(updates) == [("n1", "n4")] and "status" not in updates[("n1", "n4")]


def test_a_noisy_links_margin_grows_with_its_spread():
    # Its peers at 0.95; this link scatters (MAD 0.12 of 1.0: 4 robust sigma = 71 %): 0.5 is inside its noise.
    pairs = fleet(lambda a, b: 0.95)
    noisy = measured("n0", "n1", 0.5, mad=0.12, status="degraded", reason="below_baseline")
    pairs = [noisy if (p["a"], p["b"]) == ("n0", "n1") else p for p in pairs]
    assert judging.against_peers(pairs, RATIO)[("n0", "n1")]["status"] == "ok"


def test_without_peers_history_decides_at_comparable_load():
    quiet = measured("n0", "n1", 0.3, status="degraded", reason="below_baseline", pressure=(0.02, 0.01))
    assert judging.against_peers([quiet], RATIO) == {}  # stays degraded
    busy = measured("n0", "n1", 0.45, status="degraded", reason="below_baseline", pressure=(0.9, 0.01))
    change = judging.against_peers([busy], RATIO)[("n0", "n1")]
    assert change["status"] == "contended" and "heavier load than its history" in change["hint"]
    busy["evidence"]["expected"]["load"] = None  # a baseline whose load is not known: nothing to compare with
    assert judging.against_peers([busy], RATIO) == {}
    busy["evidence"]["expected"]["load"], busy["busbw_gbps"] = 0.05, 0.1  # a tenth: no load does that
    assert judging.against_peers([busy], RATIO) == {}


def test_a_second_look_under_heavier_load_confirms_nothing():
    pairs = [measured(a, b, 1.0) for a, b in itertools.combinations(NODES, 2) if (a, b) != ("n1", "n2")]
    slow = measured("n1", "n2", 0.45, status="degraded", reason="below_peers", pressure=(0.05, 0.05))
    slow["evidence"]["peers"] = {"reference_gbps": 1.0}
    slow["round"] = 2
    again = {**measured("n1", "n2", 0.46, pressure=(0.05, 0.9)), "round": 16}
    updates, [told] = confirmation.judge([*pairs, slow], [again])
    assert updates[("n1", "n2")]["status"] == "contended", updates
    assert "heavier load than the first time" in told["text"] and "n2: CPU pressure 90%" in told["text"]
    calm = {**measured("n1", "n2", 0.46, pressure=(0.05, 0.1)), "round": 16}
    updates, _ = confirmation.judge([*pairs, slow], [calm])
    assert updates[("n1", "n2")]["confirmation"]["outcome"] == "confirmed"
    # A link cut to a fifth is not excused by a busier second look: busy cores do not do that.
    shaped = {**slow, "busbw_gbps": 0.2}
    updates, _ = confirmation.judge([*pairs, shaped], [{**again, "busbw_gbps": 0.21}])
    assert updates[("n1", "n2")]["confirmation"]["outcome"] == "confirmed"


def test_a_cold_probe_is_busy_and_an_agents_bad_figures_are_ignored():
    cold = {"a": "n0", "b": "n1", "status": "ok", "evidence": {"a": side("n0", cold=True), "b": side("n1")}}
    assert judging.pair_score(cold) == 1.0 and "started cold" in judging.load_words(cold)
    hostile = {"cpu_pressure": "99", "sched_wait": float("nan"), "cpu_steal": True, "own_bytes": -1}
    assert judging.side_parts(hostile) == {}
    assert judging.side_parts({"cpu_pressure": 7.0})["cpu_pressure"] == 1.0  # clipped to a share
    assert judging.side_parts([1, 2]) == {}


def test_the_agent_reads_cpu_pressure_and_its_own_run_queue_wait(tmp_path):
    psi = tmp_path / "cpu"
    psi.write_text("some avg10=1.00 avg60=0.50 avg300=0.10 total=1000000\nfull avg10=0 avg60=0 avg300=0 total=0\n")
    tasks = tmp_path / "task"
    for tid, wait in (("1", 5_000_000), ("2", 15_000_000)):
        (tasks / tid).mkdir(parents=True)
        (tasks / tid / "schedstat").write_text(f"123 {wait} 7\n")
    before = agent_evidence.load_snapshot(None, psi=str(psi), tasks=str(tasks))
    psi.write_text("some avg10=50.00 avg60=0.50 avg300=0.10 total=1700000\n")
    (tasks / "2" / "schedstat").write_text("123 415000000 9\n")
    after = {**agent_evidence.load_snapshot(None, psi=str(psi), tasks=str(tasks)), "t": before["t"] + 1.0}
    load = agent_evidence.load_delta(before, after, 0)
    assert load["cpu_pressure"] == 0.7 and load["sched_delay_ms"] == 400.0 and load["sched_wait"] == 0.4
    assert agent_evidence.psi_some_us(str(tmp_path / "missing")) is None


def test_a_second_look_as_fast_as_its_partners_at_that_moment_is_not_slow_again():
    # A loaded night: n2<->n5 was at 38 % of its history, its peers at 52 %; in the pass, it and each side's
    # partner ran alike (the moment was slow, not the link): transient, nothing raised.
    pairs = [measured(a, b, 0.52) for a, b in itertools.combinations(NODES, 2) if (a, b) != ("n2", "n5")]
    slow = {**measured("n2", "n5", 0.38, status="degraded", reason="below_baseline"), "round": 3}
    again = [
        {**measured("n2", "n5", 0.40, status="degraded", reason="below_baseline"), "round": 16},
        {**measured("n2", "n0", 0.45), "round": 16},
        {**measured("n5", "n1", 0.43), "round": 16},
    ]
    updates, _ = confirmation.judge([*pairs, slow], again)
    assert updates[("n2", "n5")]["status"] == "transient", updates
    # A slow node's pair: its own side is slow with its partner too, the other side's partner is not.
    again = [
        {**measured("n2", "n5", 0.1, status="degraded", reason="below_baseline"), "round": 16},
        {**measured("n2", "n0", 0.1), "round": 16},
        {**measured("n5", "n1", 0.95), "round": 16},
    ]
    updates, _ = confirmation.judge([*pairs, slow], again)
    assert updates[("n2", "n5")]["confirmation"]["outcome"] == "confirmed" and "status" not in updates[("n2", "n5")]


def test_at_a_saturated_moment_a_quarter_of_its_peers_is_contended_and_a_tenth_is_slow():
    # Every CPU busy the whole sweep (the 2-core bed under busy loops): healthy links scatter 4x.
    pairs = fleet(lambda a, b: 0.2 if (a, b) == ("n1", "n2") else 0.02 if "n4" in (a, b) else 0.75, lambda n: 1.0)
    updates = judging.against_peers(pairs, RATIO)
    noisy = updates[("n1", "n2")]
    assert noisy["status"] == "contended", noisy
    assert "not below 20% of them" in noisy["hint"] and "every node's CPU was saturated" in noisy["hint"], noisy
    for k, u in updates.items():
        if "n4" in k:  # shaped to a fortieth of its peers: slow whatever the load
            assert "status" not in u and "slow next to its peers too" in u["hint"], u


def test_below_saturation_the_far_below_rule_is_unchanged():
    pairs = fleet(lambda a, b: 0.2 if (a, b) == ("n1", "n2") else 0.75, lambda n: 0.85)
    assert "status" not in judging.against_peers(pairs, RATIO)[("n1", "n2")]


def test_a_node_far_below_its_peers_at_a_saturated_moment_is_marked_contended_unless_a_fifth_or_less():
    def marks_for(factor):
        pairs = []
        for a, b in itertools.combinations(NODES, 2):
            bw = 0.8 * factor if "n3" in (a, b) else 0.8
            ev = {"a": side(a, 1.0), "b": side(b, 1.0)}
            pairs.append({**matrix_pair(a, b, "ok", "bandwidth", None, busbw=bw), "hint": None, "evidence": ev})
        return confirmation.peer_marks(pairs)

    noisy = marks_for(0.3)
    assert noisy and {m["status"] for m in noisy.values()} == {"contended"}, noisy
    assert all("contended, not acted on" in m["hint"] for m in noisy.values())
    shaped = marks_for(0.05)
    assert shaped and {m["status"] for m in shaped.values()} == {"degraded"}, shaped
