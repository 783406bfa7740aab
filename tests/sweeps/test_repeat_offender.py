"""A node that keeps failing, repaired or not between, is named a repeat offender: through the real lifecycle,
confirmation pass and findings (the agents' side played in-process, devtools/sweep_driver.py), and on its page."""

from __future__ import annotations

import pytest
from django.urls import reverse

from cluster_health.actions import blame
from cluster_health.models import PairProbe
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


def run_sweep(driver, reply):
    for n in NODES:
        heartbeat(n)
    sweep = driver.sweep(kind="full", nodes=NODES)
    driver.answer_all(reply)
    sweep.refresh_from_db()
    assert sweep.status == "finished"
    return sweep, documents.sweep_json(sweep)


def offenders(report) -> list[dict]:
    return [f for f in report["findings"] if f["code"] == "repeat_offender"]


def test_it_names_a_node_that_failed_in_three_of_six_sweeps_and_shows_it_on_its_page(driver, viewer_client):
    blamed_in = []
    for i, reply in enumerate([n3_broken, healthy, n3_broken, healthy, healthy, n3_broken]):
        sweep, report = run_sweep(driver, reply)
        if reply is n3_broken:
            assert [b.subject for b in blame.confirmed_findings(sweep)] == ["n3"], report["findings"]
            blamed_in.append(sweep.pk)
        if i < 5:
            assert not offenders(report), report["findings"]  # twice is not yet a pattern
    [found] = offenders(report)
    assert found["severity"] == "warn" and found["subject"] == "n3"
    listed = ", ".join(f"#{pk}" for pk in blamed_in)
    assert f"n3 was blamed in 3 of the last 6 sweeps ({listed}): a repeat offender" in found["text"]
    # A warning only: what drains is the sweep's confirmed fail finding, never this one.
    assert "repeat_offender" not in {b.code for b in blame.confirmed_findings(sweep)}

    page = viewer_client.get(reverse("node", args=["n3"])).content.decode()
    assert "repeat offender</span>: blamed in 3 of the last 6 sweeps" in page
    assert "repeat offender" not in viewer_client.get(reverse("node", args=["n2"])).content.decode()

    # Healthy again in the next sweep: still a repeat offender while three of the last ten sweeps blamed it.
    _, report = run_sweep(driver, healthy)
    assert not [f for f in report["findings"] if f["severity"] == "fail"], report["findings"]
    assert [f["subject"] for f in offenders(report)] == ["n3"]
