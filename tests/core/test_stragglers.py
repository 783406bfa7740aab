"""core.stragglers: the rank a progressing job waits for, from Flight Recorder enqueue times or sampled stacks,
and what holds it back from the live probe; quiet on a healthy job's jitter and on hostile reports."""

from __future__ import annotations

import random

from cluster_health.core import stragglers
from cluster_health.core.hangs import EXIT_CODES, diagnose

STEP_NS = 400_000_000
IN_ALL_REDUCE = {"collective": "all_reduce", "frame": {"function": "train", "file": "/job/train.py", "line": 40}}
IN_OWN_CODE = {"collective": None, "frame": {"function": "train", "file": "/job/train.py", "line": 37}}


def ranks_with(arrivals: dict[int, list[float]], completed: dict[int, list[float]] | None = None) -> list[dict]:
    """Ranks on nodes n0, n1, ... whose recorders hold one all_reduce a step, enqueued at step * 0.4 s plus
    their arrival offset (seconds); moved, in their own code (progressing)."""
    out = []
    for rank, offsets in arrivals.items():
        recent = []
        for seq, offset in enumerate(offsets, start=1):
            created = 10**18 + seq * STEP_NS + int(offset * 1e9)
            done = 10**18 + seq * STEP_NS + int(completed[rank][seq - 1] * 1e9) if completed else None
            recent.append({"pg": 0, "seq": seq, "op": "all_reduce", "created_ns": created, "completed_ns": done})
        out.append(
            {
                "rank": rank,
                "node": f"n{rank}",
                "pid": 100 + rank,
                "state": "sleeping",
                "moved": True,
                "where": IN_OWN_CODE,
                "flight": {"groups": [], "pending": None, "last_completed": None, "recent": recent},
            }
        )
    return out


def jitter(rng: random.Random, steps: int = 40, spread: float = 0.003) -> list[float]:
    return [rng.uniform(0, spread) for _ in range(steps)]


def test_the_rank_that_enqueues_last_every_step_is_named_with_its_lateness():
    rng = random.Random(1)
    ranks = ranks_with({0: jitter(rng), 1: [0.3 + x for x in jitter(rng)], 2: jitter(rng)})
    out = diagnose(ranks, world_size=3)
    assert (out["hung"], out["verdict"], EXIT_CODES[out["verdict"]]) == (False, "slow", 1)
    (culprit,) = out["culprits"]
    steps = culprit["evidence"]["steps"]
    assert (culprit["kind"], culprit["ranks"], steps["last_in"], steps["steps"]) == ("rank", [1], 40, 40)
    assert 0.29 <= steps["lateness_s"] <= 0.31 and steps["jitter_s"] < 0.004
    assert culprit["text"].startswith("the job progresses, held back by rank 1 on n1 enqueues last in 40 of the")


def test_a_healthy_jobs_jitter_and_a_small_steady_offset_stay_progressing():
    rng = random.Random(2)
    healthy = ranks_with({r: jitter(rng, spread=0.02) for r in range(4)})
    # One node's clock 10 ms ahead (NTP keeps them closer): last every step, but below MIN_LATENESS_S.
    skewed = ranks_with({0: jitter(rng), 1: [0.01 + x for x in jitter(rng)]})
    for ranks in (healthy, skewed):
        assert diagnose(ranks, world_size=len(ranks)) == {"hung": False, "verdict": "progressing", "culprits": []}


def test_a_rank_last_in_too_few_steps_or_within_the_others_spread_is_not_named():
    rng = random.Random(3)
    # Late by 0.3 s in 60 % of the steps only.
    sometimes = ranks_with({0: jitter(rng), 1: [0.3 if i % 5 < 3 else 0.0 for i in range(40)]})
    # Late by 0.12 s while the other three arrive 0.1 s apart: not above their own spread.
    spread = ranks_with({0: [0.0] * 40, 1: [0.05] * 40, 2: [0.1] * 40, 3: [0.22] * 40})
    too_few = ranks_with({0: [0.0] * 5, 1: [0.3] * 5})
    for ranks in (sometimes, spread, too_few):
        assert stragglers.from_flight(ranks) is None
        assert diagnose(ranks, world_size=len(ranks))["verdict"] == "progressing"


def test_with_completion_times_the_named_rank_must_be_the_one_that_waits_least():
    late = {0: [0.0] * 20, 1: [0.3] * 20}
    # It enqueues 0.3 s later by its clock and waits the least: a straggler.
    real = ranks_with(late, completed={0: [0.31] * 20, 1: [0.31] * 20})
    # It enqueues later by its clock but waits as long as the others: its clock is ahead, not a straggler.
    clock = ranks_with(late, completed={0: [0.1] * 20, 1: [0.4] * 20})
    assert stragglers.from_flight(real)["wait_s"] == {0: 0.31, 1: 0.01}
    assert stragglers.from_flight(clock) is None


def pair(a: str, b: str, busbw: float, latency: float = 100.0, loads: dict | None = None) -> dict:
    loads = loads or {}
    sides = {role: {"node": n, "interface": "eth0", "load": loads.get(n)} for role, n in (("a", a), ("b", b))}
    return {"a": a, "b": b, "status": "ok", "busbw_gbps": busbw, "latency_us": latency, "evidence": sides}


def test_the_live_probe_says_whether_a_link_or_a_node_holds_the_job_back():
    rng = random.Random(4)
    ranks = ranks_with({0: jitter(rng), 1: jitter(rng), 2: [0.3 + x for x in jitter(rng)]})
    shaped = [pair("n0", "n1", 1.2), pair("n0", "n2", 0.05), pair("n1", "n2", 0.06)]
    out = diagnose(ranks, world_size=3, pairs=shaped)
    (link,) = out["culprits"]
    assert (out["verdict"], link["kind"], link["subject"], link["nodes"], link["ranks"]) == (
        "slow",
        "link",
        "n2's link",
        ["n2"],
        [2],
    )
    assert "busbw 0.055 GB/s against 1.2 GB/s between the others" in link["text"]
    busy = {"n2": {"cpu_pressure": 0.8}, "n0": {"cpu_pressure": 0.1}, "n1": {"cpu_pressure": 0.05}}
    even = [pair("n0", "n1", 1.2, loads=busy), pair("n0", "n2", 1.1, loads=busy), pair("n1", "n2", 1.0, loads=busy)]
    (node,) = diagnose(ranks, world_size=3, pairs=even)["culprits"]
    assert (node["kind"], node["subject"], node["evidence"]["cpu_load"]) == ("node", "n2", 0.8)
    # Links and CPU alike: the rank's own code.
    (own,) = diagnose(ranks, world_size=3, pairs=[pair("n0", "n1", 1.2), pair("n0", "n2", 1.1), pair("n1", "n2", 1.0)])[
        "culprits"
    ]
    assert own["kind"] == "rank" and "look like the others' in the live probe" in own["text"]


def test_stacks_name_the_one_rank_in_its_own_code_in_every_sample():
    def ranks(samples: dict[int, list[dict]]) -> list[dict]:
        return [
            {"rank": r, "node": "n0", "pid": r, "state": "sleeping", "moved": True, "where": s[-1], "samples": s}
            for r, s in samples.items()
        ]

    found = stragglers.from_stacks(ranks({0: [IN_ALL_REDUCE] * 2, 1: [IN_OWN_CODE] * 2, 2: [IN_ALL_REDUCE] * 2}))
    assert (found["rank"], found["source"], found["lateness_s"]) == (1, "stacks", None)
    # Another rank outside in one sample, or only one sample: nothing named.
    assert stragglers.from_stacks(ranks({0: [IN_ALL_REDUCE, IN_OWN_CODE], 1: [IN_OWN_CODE] * 2})) is None
    assert stragglers.from_stacks(ranks({0: [IN_ALL_REDUCE], 1: [IN_OWN_CODE]})) is None
    # A sample whose stack was not read (no frame) says nothing.
    unread = {"collective": None, "frame": None}
    assert stragglers.from_stacks(ranks({0: [IN_ALL_REDUCE] * 2, 1: [unread, IN_OWN_CODE]})) is None


def test_hostile_recorder_entries_and_samples_are_ignored():
    hostile = [
        {"pg": "0", "seq": 1, "created_ns": 5},
        {"pg": 0, "seq": True, "created_ns": 5},
        {"pg": 0, "seq": 2, "created_ns": -1},
        {"pg": 0, "seq": 3, "created_ns": 2**70},
        "not an entry",
        {"pg": 0, "seq": 4, "created_ns": float("nan")},
    ]
    ranks = [
        {"rank": 0, "node": "n0", "flight": {"recent": hostile}, "samples": "x"},
        {"rank": 1, "node": "n1", "flight": {"recent": hostile * 3}, "samples": [None, 7]},
    ]
    assert stragglers.from_flight(ranks) is None and stragglers.from_stacks(ranks) is None
    assert stragglers.assess(ranks, [{"a": "n0", "b": "n1", "status": "ok", "busbw_gbps": "fast"}]) is None


def test_a_rank_last_in_only_half_the_steps_is_named_only_with_a_slow_link_in_the_probe():
    rng = random.Random(5)
    # A slow link in a ring: the rank after it enqueues last, 0.1 s late, in 60 % of the steps.
    ranks = ranks_with({0: jitter(rng), 1: [0.1 if i % 5 < 3 else 0.0 for i in range(40)], 2: jitter(rng)})
    assert stragglers.from_flight(ranks) is None and stragglers.candidate(ranks)["rank"] == 1
    even = [pair("n0", "n1", 1.2), pair("n0", "n2", 1.1), pair("n1", "n2", 1.0)]
    assert diagnose(ranks, world_size=3, pairs=even)["verdict"] == "progressing"
    shaped = [pair("n0", "n1", 1.2), pair("n0", "n2", 0.05), pair("n1", "n2", 0.06)]
    (link,) = diagnose(ranks, world_size=3, pairs=shaped)["culprits"]
    assert (link["kind"], link["subject"]) == ("link", "n2's link")


def test_a_nodes_pairs_stalled_in_the_bandwidth_stage_are_a_slow_link_unless_others_stalled_too():
    rng = random.Random(6)
    ranks = ranks_with({0: jitter(rng), 1: [0.1 + x for x in jitter(rng)], 2: jitter(rng)})
    stalled = {"status": "timeout", "stage": "bandwidth", "busbw_gbps": None, "latency_us": 900.0, "evidence": {}}
    pairs = [pair("n0", "n1", 1.2), {**stalled, "a": "n0", "b": "n2"}, {**stalled, "a": "n1", "b": "n2"}]
    (link,) = diagnose(ranks, world_size=3, pairs=pairs)["culprits"]
    assert (link["subject"], link["evidence"]["link"]["stalled"]) == ("n2's link", 2)
    assert "2 of its pairs stalled in the bandwidth stage" in link["text"]
    # Every node's pairs stalled: no one node's link to blame.
    everywhere = [{**stalled, "a": a, "b": b} for a, b in (("n0", "n1"), ("n0", "n2"), ("n1", "n2"))]
    assert stragglers.slow_link("n2", everywhere) is None
    # A failed connect is no bandwidth figure.
    refused = {**stalled, "stage": "connect", "a": "n0", "b": "n2"}
    assert stragglers.slow_link("n2", [pair("n0", "n1", 1.2), refused]) is None


def test_a_nodes_links_slow_at_the_first_look_and_transient_after_the_second_are_still_its_slow_link():
    """The live probe's confirmation pass may call a shaped link's pairs transient (lossy at the first look, not
    at the second): their figures are still what the link moved while the job was slow."""
    rng = random.Random(7)
    ranks = ranks_with({0: jitter(rng), 1: [0.1 + x for x in jitter(rng)], 2: jitter(rng)})
    transient = {"status": "transient", "reason": "lossy"}
    pairs = [
        pair("n0", "n1", 0.078),
        {**pair("n0", "n2", 0.0011), **transient},
        {**pair("n1", "n2", 0.001), **transient},
    ]
    (link,) = diagnose(ranks, world_size=3, pairs=pairs)["culprits"]
    assert (link["kind"], link["subject"], link["nodes"], link["ranks"]) == ("link", "n2's link", ["n2"], [2])
