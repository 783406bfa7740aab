"""The pure rules behind 'absent is not healthy': silence in words, absent nodes blamed, stages in ladder order."""

from datetime import UTC, datetime, timedelta

from cluster_health.core import fleet, merge, textmatrix, verdicts

NOW = datetime(2026, 3, 4, 12, 4, 7, tzinfo=UTC)


def test_it_words_silence_with_the_age_and_the_utc_time():
    assert fleet.describe_silence(NOW - timedelta(minutes=3), NOW) == "last heartbeat 3 min ago (12:01:07 UTC)"
    assert fleet.describe_silence(NOW - timedelta(days=9), NOW) == "last heartbeat 9 days ago (2026-02-23 12:04:07 UTC)"
    assert fleet.describe_silence(None, NOW) == "never heard from"
    assert fleet.offline_hint("n2", None, NOW) == "n2 offline: never heard from"


def test_it_blames_a_node_absent_at_planning_even_without_pairs():
    found = verdicts.culprit_findings(["n0", "n1", "n2"], [], absent={"n2": "never heard from"})
    assert [(f["code"], f["subject"]) for f in found] == [("node_offline", "n2")]
    assert "never heard from" in found[0]["text"] and "retire" in found[0]["text"]


def test_it_blames_the_absent_node_not_its_links():
    pairs = [
        {"a": "n0", "b": "n1", "status": "ok"},
        {"a": "n0", "b": "n2", "status": "offline", "reason": "agent_offline"},
        {"a": "n1", "b": "n2", "status": "offline", "reason": "agent_offline"},
    ]
    found = verdicts.culprit_findings(["n0", "n1", "n2"], pairs, absent={"n2": "last heartbeat 3 min ago"})
    assert [(f["code"], f["subject"]) for f in found] == [("node_offline", "n2")]
    assert "2 of its 2 pairs could not be probed" in found[0]["text"]
    assert verdicts.verdict([p["status"] for p in pairs], found) == "fail"


def test_it_leaves_an_offline_group_to_the_node_findings_that_explain_it():
    group = {"status": "offline", "reason": "agent_offline", "nodes": ["n0", "n1", "n2"], "hint": "n2 offline"}
    assert verdicts.group_findings(group, blamed={"n2"}) == []
    assert [f["code"] for f in verdicts.group_findings(group)] == ["group_collective"]


def test_it_orders_stage_times_by_the_ladder():
    times = {"store": 0.02, "bandwidth": 1.0, "connect": 0.01, "custom": 0.5, "init": 0.2}
    assert [s for s, _ in merge.ladder_order(times)] == ["connect", "store", "init", "bandwidth", "custom"]


def test_its_text_lists_the_nodes_not_probed():
    report = {
        "sweep": 3,
        "kind": "full",
        "backend": "gloo",
        "status": "finished",
        "verdict": "fail",
        "nodes": ["n0", "n1", "n2"],
        "pairs": [],
        "started": NOW.isoformat(),
        "offline_at_start": [
            {"node": "n2", "last_heartbeat": (NOW - timedelta(minutes=3)).isoformat()},
            {"node": "n3", "last_heartbeat": None},
        ],
    }
    text = textmatrix.render(report)
    assert "not probed: n2, offline when the sweep started: last heartbeat 3 min ago (12:01:07 UTC)" in text
    assert "not probed: n3, offline when the sweep started: never heard from" in text
