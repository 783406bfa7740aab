"""Repeat offenders: a node or link blamed on confirmed evidence in K of the last N sweeps, whether or not it
passed in between (cluster_health/core/history.py)."""

from __future__ import annotations

from cluster_health.core import history

NAMES = {"host1", "host2", "host3", "host4"}
HOST3 = ("host3", [])
HOST3_CONFIRMED = {("host1", "host3"), ("host2", "host3")}


def sweeps(blamed_in: dict[int, set[str]], first: int = 10, last: int = 19) -> list[tuple[int, set[str]]]:
    return [(pk, blamed_in.get(pk, set())) for pk in range(first, last + 1)]


def test_it_names_a_node_blamed_in_three_of_the_last_ten_sweeps_with_passes_between():
    [found] = history.repeat_offenders(sweeps({12: {"host3"}, 15: {"host3"}, 19: {"host3"}}), 3, 10)
    assert (found["severity"], found["code"], found["subject"]) == ("warn", "repeat_offender", "host3")
    assert found["text"] == (
        "host3 was blamed in 3 of the last 10 sweeps (#12, #15, #19): a repeat offender; "
        "check its hardware before returning it to service"
    )
    assert (found["detail"]["blamed"], found["detail"]["window"], found["detail"]["sweeps"]) == (3, 10, [12, 15, 19])


def test_it_does_not_name_a_node_blamed_twice_or_blamed_before_the_window():
    assert history.repeat_offenders(sweeps({12: {"host3"}, 19: {"host3"}}), 3, 10) == []
    # Blamed in #1 and #2 long ago: only the last ten sweeps (#10-#19) count.
    assert history.repeat_offenders([(1, {"host3"}), (2, {"host3"}), *sweeps({19: {"host3"}})], 3, 10) == []


def test_it_counts_the_sweeps_there_are_when_fewer_than_n():
    [found] = history.repeat_offenders(sweeps({10: {"host3"}, 11: {"host3"}, 13: {"host3"}}, last=13), 3, 10)
    assert "in 3 of the last 4 sweeps (#10, #11, #13)" in found["text"]


def test_it_names_a_link_and_leaves_out_a_link_its_offending_node_explains():
    blamed = {pk: {"host1<->host2", "host3<->host4", "host3"} for pk in (11, 14, 17)}
    found = history.repeat_offenders(sweeps(blamed), 3, 10)
    assert [(f["subject"], f["pairs"]) for f in found] == [("host3", []), ("host1<->host2", ["host1<->host2"])]
    assert found[1]["text"].startswith("host1<->host2 failed in 3 of the last 10 sweeps (#11, #14, #17)")
    assert all(f["severity"] == "warn" for f in found)  # never a fail: nothing is drained for it


def test_a_fail_finding_blames_its_node_only_on_confirmed_evidence():
    assert history.blamed_subjects([HOST3], NAMES, HOST3_CONFIRMED) == {"host3"}
    assert history.blamed_subjects([HOST3], NAMES, set()) == set()  # seen once: not counted
    # A finding listing its pairs rests on those: a confirmed pair of the node's outside them is not its evidence.
    assert history.blamed_subjects([("host3", ["host3<->host4"])], NAMES, HOST3_CONFIRMED) == set()
    assert history.blamed_subjects([HOST3], NAMES, set(), local=True) == {"host3"}  # a gpu sweep's own check


def test_a_link_is_blamed_when_confirmed_and_named_the_same_way_round():
    assert history.blamed_subjects([("host2<->host1", [])], NAMES, {("host1", "host2")}) == {"host1<->host2"}
    assert history.blamed_subjects([("host2<->host1", [])], NAMES, {("host1", "host3")}) == set()


def test_subjects_that_are_no_node_or_link_blame_nothing():
    failing = [("cluster", []), ("links", []), ("host1<->host9", []), ("rack1", [])]
    assert history.blamed_subjects(failing, NAMES, HOST3_CONFIRMED | {("host1", "host9")}) == set()
