"""A node that keeps failing on several days, repaired or not between, is named a repeat offender: through the real lifecycle,
confirmation pass and findings (the agents' side played in-process, devtools/sweep_driver.py), and on its page."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from cluster_health.actions import alerts, blame
from cluster_health.models import PairProbe, Sweep
from cluster_health.shapes import documents
from devtools.sweep_driver import heartbeat, result_for

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("memory_channel_layer")]
NODES = [f"n{i}" for i in range(1, 7)]


def with_n3(cmd) -> bool:
    if cmd["kind"] != "pair":
        return False
    probe = PairProbe.objects.select_related("node_a", "node_b").get(pk=cmd["probe_id"])
    return "n3" in (probe.node_a.name, probe.node_b.name)


def healthy(cmd):
    return result_for(cmd, busbw=1.0)


def n3_broken(cmd):
    """Every pair with n3 times out at connect, in the planned rounds and when probed again."""
    if with_n3(cmd):
        return result_for(cmd, status="timeout", stage="connect", reason="connect_timeout")
    return healthy(cmd)


def run_sweep(driver, reply, days_ago: int = 0):
    """A full sweep of NODES answered by ``reply``; then dated ``days_ago`` days back (its day is its end's)."""
    for n in NODES:
        heartbeat(n)
    sweep = driver.sweep(kind="full", nodes=NODES)
    driver.answer_all(reply)
    sweep.refresh_from_db()
    assert sweep.status == "finished"
    report = documents.sweep_json(sweep)
    if days_ago:
        Sweep.objects.filter(pk=sweep.pk).update(finished=sweep.finished - timedelta(days=days_ago))
    return sweep, report


def offenders(report) -> list[dict]:
    return [f for f in report["findings"] if f["code"] == "repeat_offender"]


def test_it_names_a_node_that_failed_on_three_days_and_shows_it_on_the_pages_the_api_and_its_alert(
    driver, viewer_client
):
    # Three sweeps find n3 broken on one day: one bad day, not yet a pattern.
    for _ in range(3):
        sweep, report = run_sweep(driver, n3_broken, days_ago=10)
        assert [b.subject for b in blame.confirmed_findings(sweep)] == ["n3"], report["findings"]
        assert not offenders(report), report["findings"]
    first_day = sweep.pk
    run_sweep(driver, healthy, days_ago=5)
    sweep, report = run_sweep(driver, n3_broken, days_ago=3)
    assert not offenders(report), report["findings"]  # two days
    second_day = sweep.pk
    sweep, report = run_sweep(driver, n3_broken)
    [found] = offenders(report)
    assert found["severity"] == "warn" and found["subject"] == "n3"
    assert found["text"].startswith("n3 was blamed on 3 of the last 30 days (")
    assert f"#{first_day - 2}, #{first_day - 1}, #{first_day};" in found["text"]
    assert f"#{second_day};" in found["text"] and f"#{sweep.pk}): a repeat offender" in found["text"]
    # A warning only: what drains is the sweep's confirmed fail finding, never this one.
    confirmed = blame.confirmed_findings(sweep)
    assert "repeat_offender" not in {b.code for b in confirmed}
    # The node's alert says so beside its own reason.
    problems, _ = alerts.sweep_problems(sweep, {b.finding for b in confirmed})
    alert = problems["node:n3"]
    assert alert["severity"] == "fail" and alert["reason"] != "repeat_offender"
    assert "; n3 was blamed on 3 of the last 30 days (" in alert["text"]

    page = viewer_client.get(reverse("node", args=["n3"])).content.decode()
    assert "repeat offender</span>: blamed on 3 of the last 30 days" in page
    assert "repeat offender" not in viewer_client.get(reverse("node", args=["n2"])).content.decode()
    listing = viewer_client.get(reverse("nodes")).content.decode()
    assert listing.count("data-repeat-offender") == 1 and "repeat offender: 3 of 30 days" in listing
    assert "1 repeat offender</b>" in listing
    body = viewer_client.get(reverse("api-nodes")).json()
    by_name = {n["name"]: n for n in body["nodes"]}
    field = by_name["n3"]["repeat_offender"]
    assert (field["blamed_days"], field["window_days"], len(field["days"])) == (3, 30, 3)
    assert field["history"] == reverse("node", args=["n3"]) + "#recent-problems"
    assert viewer_client.get(field["history"]).status_code == 200
    assert by_name["n2"]["repeat_offender"] is None

    # Healthy again in the next sweep: still a repeat offender while three of the last 30 days blamed it.
    _, report = run_sweep(driver, healthy)
    assert not [f for f in report["findings"] if f["severity"] == "fail"], report["findings"]
    assert [f["subject"] for f in offenders(report)] == ["n3"]
    # Once the first bad day is 30 days back, the flag goes: on the API without another sweep.
    Sweep.objects.filter(pk__lte=first_day).update(finished=timezone.now() - timedelta(days=30))
    body = viewer_client.get(reverse("api-nodes")).json()
    assert {n["name"]: n["repeat_offender"] for n in body["nodes"]}["n3"] is None
