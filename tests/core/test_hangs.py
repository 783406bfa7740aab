"""The diagnosis of a hung job from its ranks' evidence (cluster_health.core.hangs): pure, every verdict."""

from cluster_health.core.hangs import EXIT_CODES, diagnose

IN_ALL_REDUCE = {"collective": "all_reduce", "frame": {"function": "step", "file": "/job/train.py", "line": 40}}


def rank(n: int, node: str, where=IN_ALL_REDUCE, **kw) -> dict:
    return {"rank": n, "node": node, "pid": 100 + n, "state": "sleeping", "where": where, "moved": False, **kw}


def four(**changes) -> list[dict]:
    ranks = [rank(i, f"gpu-{i // 2}") for i in range(4)]
    for i, change in changes.items():
        ranks[int(i[1:])].update(change)
    return ranks


def test_a_rank_in_its_own_code_is_the_culprit_with_its_place():
    loader = {"collective": None, "frame": {"function": "load_batch", "file": "/job/train.py", "line": 88}}
    out = diagnose(four(r3={"where": loader, "moved": True}), world_size=4)
    assert (out["hung"], out["verdict"]) == (True, "application")
    (c,) = out["culprits"]
    assert (c["kind"], c["ranks"], c["nodes"]) == ("rank", [3], ["gpu-1"])
    assert c["text"] == (
        "rank 3 on gpu-1 is inside `load_batch` (train.py:88), not in `all_reduce` where the other 3 ranks wait: "
        "the job's code, not the network"
    )
    assert EXIT_CODES[out["verdict"]] == 2


def test_ranks_in_different_collectives_are_a_mismatch():
    other = {"collective": "broadcast", "frame": None}
    out = diagnose(four(r1={"where": other}), world_size=4)
    (c,) = out["culprits"]
    assert (out["verdict"], c["kind"]) == ("application", "mismatch")
    assert "rank(s) 0, 2, 3 in `all_reduce`" in c["text"] and "rank(s) 1 in `broadcast`" in c["text"]


def test_a_stopped_or_dead_rank_or_a_missing_one_is_the_nodes():
    out = diagnose(four(r2={"state": "stopped"}), world_size=4)
    assert (
        out["verdict"] == "node"
        and out["culprits"][0]["text"]
        == "rank 2 on gpu-1 is stopped (SIGSTOP or a debugger): the other ranks wait for it"
    )
    gone = diagnose(four()[:3], world_size=4, silent_nodes=["gpu-1"])
    assert (
        gone["verdict"] == "node" and gone["culprits"][0]["ranks"] == [3] and gone["culprits"][0]["nodes"] == ["gpu-1"]
    )


def test_every_rank_in_one_collective_and_a_failing_path_is_the_network():
    pairs = [
        {
            "a": "gpu-0",
            "b": "gpu-1",
            "status": "timeout",
            "stage": "connect",
            "reason": "connect_timeout",
            "hint": "firewall?",
        },
        {"a": "gpu-0", "b": "gpu-0", "status": "ok"},
    ]
    out = diagnose(four(), world_size=4, pairs=pairs)
    (c,) = out["culprits"]
    assert (out["verdict"], c["kind"], c["subject"], c["hint"]) == ("network", "link", "gpu-0<->gpu-1", "firewall?")
    stalled = four(r0={"connections": [{"peer": "10.0.0.2:4000", "unacked_bytes": 65536, "retransmits": 9}]})
    assert diagnose(stalled, world_size=4)["culprits"][0]["text"].startswith(
        "rank 0 on gpu-0 has 65536 bytes unacknowledged"
    )


def test_ranks_that_move_are_progressing_and_nothing_found_is_unknown():
    assert diagnose(four(r0={"moved": True}, r1={"moved": True}, r2={"moved": True}, r3={"moved": True}), 4) == {
        "hung": False,
        "verdict": "progressing",
        "culprits": [],
    }
    none = diagnose([], world_size=8, silent_nodes=["gpu-9"])
    assert none["verdict"] == "unknown" and "no rank of the job was found" in none["why"] and "gpu-9" in none["why"]
    blind = diagnose([rank(0, "n", where={"collective": None, "frame": None}, stack_error="Permission denied")], 1)
    assert blind["verdict"] == "unknown" and "Permission denied" in blind["why"]
    quiet = diagnose(four(), world_size=4)
    assert quiet["verdict"] == "unknown" and "Flight Recorder" in quiet["why"]
