"""The overview page: nodes with their online state, the latest sweep's verdict and findings."""

import pytest
from django.urls import reverse
from django.utils import timezone

from tests.support.dashboard_rows import make_nodes, make_sweep, make_user

pytestmark = pytest.mark.django_db


def test_it_requires_login(client):
    response = client.get("/")
    assert response.status_code == 302
    assert response["Location"].startswith(reverse("login"))


def test_it_lists_nodes_with_online_state_and_the_latest_verdict(client):
    client.force_login(make_user("viewer", operator=False))
    nodes = make_nodes(["node10", "node2", "node1"])
    make_nodes(["stale1"], online=False)
    make_sweep(
        nodes,
        {("node1", "node2"): {"status": "timeout", "stage": "connect", "reason": "connect_timeout"}},
        verdict="fail",
        findings=[("fail", "node2", "node2 cannot be reached from node1")],
    )
    html = client.get("/").content.decode()
    # Natural order: node2 before node10.
    assert html.index('data-node="node1"') < html.index('data-node="node2"') < html.index('data-node="node10"')
    for shown in (
        "3 of 4 online",
        'class="verdict verdict-fail"',
        "node2 cannot be reached from node1",
        "cluster_health/vendor/plotly.min.js",
    ):
        assert shown in html
    assert "Start a sweep" not in html  # a viewer changes nothing


def test_it_shows_operators_the_start_button(client):
    client.force_login(make_user("op", operator=True))
    assert "Start a sweep" in client.get("/").content.decode()


def test_it_says_how_to_start_an_agent_when_there_is_none(client):
    client.force_login(make_user("viewer", operator=False))
    assert "python -m agents run" in client.get("/").content.decode()


def test_its_state_endpoint_returns_the_compact_matrix(client):
    client.force_login(make_user("viewer", operator=False))
    sweep = make_sweep(make_nodes(["a", "b", "c"]))
    state = client.get(reverse("sweep-state", args=[sweep.pk])).json()
    assert state["matrix"]["nodes"] == ["a", "b", "c"]
    assert state["progress"]["pairs_done"] == 3 and state["verdict"] == "pass"


def test_its_node_table_endpoint_gives_online_state_and_last_heartbeat_offline_first_in_natural_order(client):
    assert client.get(reverse("nodes-state")).status_code == 302  # login required
    client.force_login(make_user("viewer", operator=False))
    make_nodes(["node10", "node2"])
    make_nodes(["stale1"], online=False)
    state = client.get(reverse("nodes-state")).json()
    # An offline node of the fleet fails every sweep: it leads the table.
    assert [n["name"] for n in state["nodes"]] == ["stale1", "node2", "node10"]
    assert [n["online"] for n in state["nodes"]] == [False, True, True]
    assert state["online"] == 2
    assert all(n["last_heartbeat"] and "facts" not in n for n in state["nodes"])
    assert state["now"] >= state["nodes"][-1]["last_heartbeat"]


def test_a_large_fleet_lists_its_offline_nodes_first_and_counts_the_rest(client, monkeypatch):
    from cluster_health.web.views import home as views

    monkeypatch.setattr(views, "OVERVIEW_NODE_ROWS", 2)
    client.force_login(make_user("viewer", operator=False))
    make_nodes(["node1", "node2", "node3"])
    make_nodes(["down1"], online=False)
    state = client.get(reverse("nodes-state")).json()
    assert [n["name"] for n in state["nodes"]] == ["down1", "node1"]
    assert (state["total"], state["online"], state["retired_total"]) == (4, 3, 0)
    page = client.get(reverse("overview")).content.decode()
    assert "3 of 4 online" in page and "2 of 4 listed, offline first" in page
    assert page.count("<tr data-node=") == 2


def test_a_retired_node_is_listed_with_its_times_in_the_one_format(client):
    from cluster_health.models import Node
    from cluster_health.web import times

    client.force_login(make_user("viewer", operator=False))
    make_nodes(["node1", "gone1"])
    Node.objects.filter(name="gone1").update(active=False, retired_at=timezone.now())
    gone = Node.objects.get(name="gone1")
    html = client.get("/").content.decode()
    row = html[html.index('data-retired-node="gone1"') :].split("</tr>")[0]
    assert f">{times.absolute(gone.retired_at)}</time>" in row  # "2026-11-25 22:51:01 UTC", never ISO
    assert f'data-ago title="{times.absolute(gone.last_heartbeat)}"' in row  # an age the page keeps current
