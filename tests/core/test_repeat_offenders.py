"""Repeat offenders: a node or link blamed on confirmed evidence on K of the last N calendar days, whether or not it
passed in between (cluster_health/core/history.py)."""

from __future__ import annotations

from datetime import date, timedelta

from cluster_health.core import history

NAMES = {"host1", "host2", "host3", "host4"}
HOST3 = ("host3", [])
HOST3_CONFIRMED = {("host1", "host3"), ("host2", "host3")}
TODAY = date(2026, 11, 27)


def sweeps(blamed_on: dict[int, set[str]], per_day: int = 1) -> list[tuple[int, date, set[str]]]:
    """Sweeps ``per_day`` a day over the 40 days to TODAY, ids counting up; ``blamed_on``: days ago -> blamed."""
    out = []
    for ago in range(40, -1, -1):
        for i in range(per_day):
            out.append((1000 - ago * per_day + i, TODAY - timedelta(days=ago), blamed_on.get(ago, set())))
    return out


def test_it_names_a_node_blamed_on_three_of_the_last_thirty_days_with_passes_between():
    [found] = history.repeat_offenders(sweeps({29: {"host3"}, 12: {"host3"}, 0: {"host3"}}), 3, 30, TODAY)
    assert (found["severity"], found["code"], found["subject"]) == ("warn", "repeat_offender", "host3")
    assert found["text"] == (
        "host3 was blamed on 3 of the last 30 days (2026-10-29 #971; 2026-11-15 #988; 2026-11-27 #1000): a repeat "
        "offender; check its hardware before returning it to service"
    )
    detail = found["detail"]
    assert (detail["blamed"], detail["window"], detail["sweeps"]) == (3, 30, [971, 988, 1000])
    assert detail["days"] == ["2026-10-29", "2026-11-15", "2026-11-27"]


def test_days_count_not_sweeps_many_sweeps_of_one_bad_day_are_one_day():
    # Blamed by every one of 24 sweeps on each of two days: two bad days, not a repeat offender.
    assert history.repeat_offenders(sweeps({3: {"host3"}, 1: {"host3"}}, per_day=24), 3, 30, TODAY) == []
    [found] = history.repeat_offenders(sweeps({5: {"host3"}, 3: {"host3"}, 1: {"host3"}}, per_day=24), 3, 30, TODAY)
    assert found["detail"]["blamed"] == 3 and len(found["detail"]["sweeps"]) == 72


def test_a_day_before_the_window_does_not_count():
    # Thirty days ago is the 31st day back: outside a window of 30 that ends today.
    assert history.repeat_offenders(sweeps({30: {"host3"}, 12: {"host3"}, 0: {"host3"}}), 3, 30, TODAY) == []
    # Days after ``today`` (a sweep whose clock ran ahead) do not count either.
    later = [*sweeps({12: {"host3"}, 0: {"host3"}}), (2000, TODAY + timedelta(days=1), {"host3"})]
    assert history.repeat_offenders(later, 3, 30, TODAY) == []


def test_it_names_a_link_and_leaves_out_a_link_its_offending_node_explains():
    blamed = {ago: {"host1<->host2", "host3<->host4", "host3"} for ago in (20, 10, 2)}
    found = history.repeat_offenders(sweeps(blamed), 3, 30, TODAY)
    assert [(f["subject"], f["pairs"]) for f in found] == [("host3", []), ("host1<->host2", ["host1<->host2"])]
    assert found[1]["text"].startswith("host1<->host2 failed on 3 of the last 30 days (2026-11-07 #980;")
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
