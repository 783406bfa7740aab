"""Every page renders for a viewer; viewers change nothing; forms need the CSRF token."""

import pytest
from django.test import Client
from django.urls import reverse

from cluster_health.models import Sweep
from tests.support.dashboard_rows import PASSWORD, make_nodes, make_sweep, make_user

pytestmark = pytest.mark.django_db


@pytest.fixture
def viewer(client):
    client.force_login(make_user("viewer", operator=False))
    return client


@pytest.fixture
def cluster():
    nodes = make_nodes(
        ["node1", "node2", "node10"],
        facts={
            "node1": {"versions": {"torch": "2.13.0", "nccl": "2.21.5"}, "host": {"loopback": False}},
            "node2": {"versions": {"torch": "2.13.0", "nccl": "2.21.5"}, "host": {"loopback": False}},
            "node10": {"versions": {"torch": "2.13.0", "nccl": "2.18.1"}, "host": {"loopback": True}},
        },
    )
    before = make_sweep(nodes)
    after = make_sweep(
        nodes,
        {
            ("node2", "node10"): {
                "status": "failed",
                "stage": "init",
                "reason": "transport",
                "hint": "set GLOO_SOCKET_IFNAME=eth0",
                "busbw_gbps": None,
            }
        },
        verdict="fail",
    )
    return nodes, before, after


def test_it_renders_every_page_for_a_viewer(viewer, cluster):
    _nodes, before, after = cluster
    for url in [
        "/",
        reverse("history"),
        reverse("sweep", args=[after.pk]),
        reverse("consistency"),
        reverse("node", args=["node10"]),
        reverse("pair", args=["node2", "node10"]),
        f"{reverse('compare')}?a={before.pk}&b={after.pk}",
        reverse("sweep-report", args=[after.pk]),
    ]:
        response = viewer.get(url)
        assert response.status_code == 200, url


def test_it_highlights_the_odd_node_in_the_consistency_table(viewer, cluster):
    html = viewer.get(reverse("consistency")).content.decode()
    row = html[html.index('data-node="node10"') :]
    row = row[: row.index("</tr>")]
    assert 'class="mono odd"' in row and "2.18.1" in row


def test_it_filters_history_by_verdict(viewer, cluster):
    _nodes, before, after = cluster
    html = viewer.get(reverse("history"), {"verdict": "fail"}).content.decode()
    assert f'data-sweep="{after.pk}"' in html and f'data-sweep="{before.pk}"' not in html


def test_its_report_names_what_broke(viewer, cluster):
    _nodes, before, after = cluster
    html = viewer.get(reverse("sweep-report", args=[after.pk]), {"before": before.pk}).content.decode()
    assert "node2 ↔ node10" in html and "transport" not in html.split("Broke")[0]


def test_it_shows_the_pair_hint(viewer, cluster):
    html = viewer.get(reverse("pair", args=["node2", "node10"])).content.decode()
    assert "set GLOO_SOCKET_IFNAME=eth0" in html


def test_a_viewer_gets_403_starting_or_cancelling_a_sweep(viewer, cluster):
    make_nodes(["node20"])
    assert viewer.get(reverse("sweep-new")).status_code == 403
    assert viewer.post(reverse("sweep-new"), {"kind": "connectivity", "backend": "gloo"}).status_code == 403
    open_sweep = make_sweep([], status="running", verdict="unknown")
    assert viewer.post(reverse("sweep-cancel", args=[open_sweep.pk])).status_code == 403
    assert Sweep.objects.get(pk=open_sweep.pk).status == "running"


def test_a_post_without_the_csrf_token_fails():
    make_user("op", operator=True)
    client = Client(enforce_csrf_checks=True)
    assert client.login(username="op", password=PASSWORD)
    response = client.post(reverse("sweep-new"), {"kind": "connectivity", "backend": "gloo"})
    assert response.status_code == 403
    assert not Sweep.objects.exists()


def test_an_operator_can_cancel_an_open_sweep(client):
    client.force_login(make_user("op", operator=True))
    open_sweep = make_sweep(
        make_nodes(["a", "b"]), {("a", "b"): {"status": "running"}}, status="running", verdict="unknown"
    )
    response = client.post(reverse("sweep-cancel", args=[open_sweep.pk]))
    assert response.status_code == 302
    assert Sweep.objects.get(pk=open_sweep.pk).status == "cancelled"


def test_it_shows_why_a_finding_was_raised(client):
    from cluster_health.models import Finding, PairProbe

    client.force_login(make_user("why", operator=False))
    timeout = {"status": "timeout", "stage": "connect", "reason": "connect_timeout", "hint": "n2 could not reach n1"}
    sweep = make_sweep(make_nodes(["n1", "n2"]), {("n1", "n2"): timeout}, kind="connectivity")
    probe = PairProbe.objects.get(sweep=sweep)
    finding = {
        "severity": "fail",
        "code": "inbound_blocked",
        "subject": "n1",
        "text": "n1 accepts no inbound connection from any peer",
        "pairs": ["n1<->n2"],
        "detail": {"evidence": ["n2 -> n1 (store on n1): timeout"], "next_step": "open it"},
    }
    f = Finding.objects.create(sweep=sweep, **finding)
    page = client.get(f"/sweeps/{sweep.pk}/findings/{f.pk}/").content.decode()
    assert "n1 accepts no inbound connection" in page and "n2 -&gt; n1 (store on n1): timeout" in page
    assert "open it" in page and f"?probe={probe.pk}" in page
    assert f"/sweeps/{sweep.pk}/findings/{f.pk}/" in client.get(f"/sweeps/{sweep.pk}/").content.decode()


def test_a_nodes_page_and_json_show_its_clock_offset(viewer_client):
    from cluster_health.models import Node

    Node.objects.create(name="skewed", address="10.0.0.9", clock_offset_s=42.37)
    page = viewer_client.get(reverse("node", args=["skewed"])).content.decode()
    assert 'data-clock-offset class="warn">clock +42.4 s' in page
    listed = {n["name"]: n for n in viewer_client.get("/api/nodes").json()["nodes"]}
    assert listed["skewed"]["clock_offset_s"] == 42.37
