"""A link's and a node's history at a glance: the pair and node pages' charts, read in one query whatever the length."""

import pytest
from django.core.cache import cache
from django.db import connection
from django.test.utils import CaptureQueriesContext

from cluster_health.models import Baseline, BaselinePair, Sweep
from cluster_health.shapes import link_history
from tests.support.dashboard_rows import make_nodes
from tests.support.history_rows import sweeps_over

pytestmark = pytest.mark.django_db

SLOW = {"status": "degraded", "reason": "below_baseline", "busbw_gbps": 0.2}
OFFLINE = {"status": "offline", "stage": "resolve", "reason": "agent_offline", "busbw_gbps": None}


@pytest.fixture
def viewer(viewer_client):
    cache.clear()  # the expected busbw is cached per baseline id, which the database reuses between tests
    return viewer_client


def history_queries(client, url) -> list[str]:
    with CaptureQueriesContext(connection) as ctx:
        assert client.get(url).status_code == 200
    return [q["sql"] for q in ctx.captured_queries]


def test_it_draws_a_nodes_links_per_sweep_with_their_statuses(viewer):
    nodes = make_nodes(["h1", "h2", "h3", "h4"])
    sweeps_over(nodes, 2, lambda k: {("h1", "h3"): SLOW, ("h1", "h4"): OFFLINE} if k else {})
    page = viewer.get("/nodes/h1/")
    old, new = page.context["trend"]
    assert (old["links"], old["counts"], old["median_gbps"]) == (3, {"ok": 3}, 2.0)
    # Worst first; the offline link is counted as a link's status, never as h1 being offline.
    assert new["counts"] == {"offline": 1, "degraded": 1, "ok": 1}
    assert (new["low_gbps"], new["low_peer"], new["high_gbps"], new["median_gbps"]) == (0.2, "h3", 2.0, 1.1)
    assert old["when"].endswith("UTC") and old["t"] < new["t"]
    # No baseline: the axis runs to the fastest link shown.
    assert page.context["trend_scale"] == {"gbps": 2.0, "expected": False}
    html = page.content.decode()
    assert 'id="node-history-plot"' in html and "cluster_health/history.js" in html


def test_a_node_page_reads_its_history_in_one_query_however_long(viewer):
    nodes = make_nodes(["h1", "h2", "h3"])
    sweeps_over(nodes, 3)
    few = history_queries(viewer, "/nodes/h1/")
    sweeps_over(nodes, 12)
    many = history_queries(viewer, "/nodes/h1/")
    assert len(many) == len(few)  # no query per sweep
    assert len(viewer.get("/nodes/h1/").context["trend"]) == 15
    assert sum("cluster_health_pairprobe" in q for q in many) == sum("cluster_health_pairprobe" in q for q in few)
    with CaptureQueriesContext(connection) as ctx:
        points, _ = link_history.node_trend(nodes[0])
    # The sweeps, the node's pairs in them (the one read of the pair table), the slowest peers' names.
    assert len(ctx.captured_queries) == 3 and len(points) == 15
    assert sum("cluster_health_pairprobe" in q["sql"] for q in ctx.captured_queries) == 1


def test_a_node_page_goes_back_only_so_many_sweeps(viewer):
    nodes = make_nodes(["h1", "h2"])
    made = sweeps_over(nodes, link_history.HISTORY_SWEEPS + 2)
    trend = viewer.get("/nodes/h1/").context["trend"]
    assert [p["sweep"] for p in trend] == [s.pk for s in made[2:]]
    Sweep.objects.create(nodes=["h1", "h2"], status="running")  # an open sweep is not history yet
    assert len(viewer.get("/nodes/h2/").context["trend"]) == link_history.HISTORY_SWEEPS


def test_the_charts_are_anchored_at_the_fleets_expected_busbw(viewer):
    nodes = make_nodes(["h1", "h2", "h3"])
    base = Baseline.objects.create(name="nightly", source="rolling")
    for (a, b), gbps in {("h1", "h2"): 2.4, ("h1", "h3"): 2.5, ("h2", "h3"): 2.6}.items():
        BaselinePair.objects.create(baseline=base, node_a=a, node_b=b, busbw_gbps=gbps)
    sweeps_over(nodes, 2, lambda k: {("h1", "h2"): SLOW} if k else {}, baseline=base)
    assert viewer.get("/nodes/h1/").context["trend_scale"] == {"gbps": 2.5, "expected": True}
    page = viewer.get("/pairs/h1/h2/")
    assert page.context["trend_scale"] == {"gbps": 2.5, "expected": True}
    assert [(p["status"], p["busbw_gbps"]) for p in page.context["trend"]] == [("ok", 2.0), ("degraded", 0.2)]
    assert "the fleet's expected busbw, 2.500 GB/s" in page.content.decode()


def test_a_pair_page_reads_its_history_in_one_query_however_long(viewer):
    nodes = make_nodes(["h1", "h2"])
    sweeps_over(nodes, 3)
    few = history_queries(viewer, "/pairs/h1/h2/")
    sweeps_over(nodes, 40, lambda k: {("h1", "h2"): SLOW} if k % 2 else {})
    many = history_queries(viewer, "/pairs/h1/h2/")
    assert len(many) == len(few)
    assert sum("cluster_health_pairprobe" in q for q in many) == 1
    trend = viewer.get("/pairs/h1/h2/").context["trend"]
    assert len(trend) == link_history.HISTORY_SWEEPS and trend[-1]["status"] == "degraded"
