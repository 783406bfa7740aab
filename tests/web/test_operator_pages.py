"""Operator actions from the pages and the API (maintenance, acknowledge), the audit log that records them,
and the coverage the dashboard and GET /api/coverage show; viewers change nothing."""

from __future__ import annotations

import json
import re

import pytest
from django.urls import reverse

from cluster_health import coverage
from cluster_health.models import AuditEntry, Node
from tests.support.action_rows import finished_sweep
from tests.support.dashboard_rows import make_nodes, make_user

pytestmark = pytest.mark.django_db
NODES = ["n1", "n2", "n3"]


@pytest.fixture
def operator_client(client):
    make_nodes(NODES)
    client.force_login(make_user("olivia", operator=True))
    return client


def test_an_operator_puts_a_node_in_maintenance_from_its_page_and_the_audit_page_shows_it(operator_client):
    page = operator_client.get(reverse("node", args=["n2"]))
    assert b"data-maintenance-form" in page.content
    done = operator_client.post(reverse("node-maintenance", args=["n2"]), {"action": "on", "reason": "BIOS update"})
    assert done.status_code == 302
    assert Node.objects.get(name="n2").state == "maintenance"
    assert b'data-operator-state="maintenance"' in operator_client.get(reverse("nodes")).content
    audit = operator_client.get(reverse("audit")).content.decode()
    assert "BIOS update" in audit and "olivia" in audit


def test_a_viewer_changes_nothing(viewer_client):
    make_nodes(NODES)
    assert viewer_client.post(reverse("node-maintenance", args=["n2"]), {"reason": "x"}).status_code == 403
    answer = viewer_client.post(
        reverse("api-node-maintenance", args=["n2"]), json.dumps({"reason": "x"}), content_type="application/json"
    )
    assert answer.status_code == 403
    assert Node.objects.get(name="n2").state == "service" and not AuditEntry.objects.exists()


def test_the_api_refuses_a_reason_with_a_nul_and_acknowledges_a_finding(operator_client):
    url = reverse("api-node-maintenance", args=["n2"])
    bad = operator_client.post(url, json.dumps({"reason": "a\x00b"}), content_type="application/json")
    assert bad.status_code == 400 and "control characters" in bad.json()["error"]
    ok = operator_client.post(url, json.dumps({"reason": "PSU swap"}), content_type="application/json")
    assert ok.json()["state"] == "maintenance"
    sweep = finished_sweep(NODES, {("n1", "n3"): "timeout"}, [("fail", "link_failed", "n1<->n3", "n1<->n3 failed")])
    finding = sweep.findings.get()
    ack = operator_client.post(
        reverse("api-finding-acknowledge", args=[finding.pk]),
        json.dumps({"note": "cable ordered"}),
        content_type="application/json",
    )
    assert ack.status_code == 200 and ack.json()["by"] == "olivia"
    page = operator_client.get(reverse("finding", args=[sweep.pk, finding.pk])).content.decode()
    assert 'data-acknowledgement="active"' in page and "cable ordered" in page
    entries = operator_client.get(reverse("api-audit")).json()["entries"]
    assert [(e["action"], e["source"]) for e in entries] == [("acknowledge", "api"), ("maintenance", "api")]


def test_coverage_counts_each_pairs_last_measurement(operator_client):
    sweep = finished_sweep(["n1", "n2"])
    coverage.record(sweep)
    got = operator_client.get(reverse("api-coverage")).json()
    assert (got["pairs_total"], got["pairs_measured"], got["within_1d"], got["share_7d"]) == (3, 1, 1, 0.3333)
    assert {(p["a"], p["b"]) for p in got["stalest"][:2]} == {("n1", "n3"), ("n2", "n3")}
    assert got["stalest"][0]["last_measured"] is None
    by_node = {n["name"]: n for n in got["nodes"]}
    assert by_node["n1"]["last_full_measurement"] is None and by_node["n1"]["pairs_measured"] == 1
    page = operator_client.get(reverse("overview")).content.decode()
    assert "data-coverage" in page
    # The pair measured: its time in the one format with its zone; the others never measured.
    stalest = re.search(r"Stalest: (.*?)</p>", page).group(1)
    measured = r'n1 ↔ n2</a> <span class="muted">\(<time datetime="[^"]+">\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC</time>\)'
    assert stalest.count("(never)") == 2 and re.search(measured, stalest), stalest
