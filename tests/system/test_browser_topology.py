"""The Topology page in a real browser against the real ASGI server: a viewer sees the racks a full sweep
measured, the node whose label they contradict, and the matrix ordered by group with the tree beside it.
A screenshot is kept under test-artifacts/."""

import pytest
from django.utils import timezone

from cluster_health.models import Node, PairProbe, Sweep
from tests.support.artifacts import shot

pytestmark = [pytest.mark.e2e, pytest.mark.browser, pytest.mark.django_db(transaction=True), pytest.mark.timeout(120)]

LABELS = {
    "gpu01": "rack-a",
    "gpu02": "rack-a",
    "gpu03": "rack-a",
    "gpu04": "rack-b",
    "gpu05": "rack-b",
    "gpu06": "rack-b",
}
CABLED = {**LABELS, "gpu03": "rack-b"}  # gpu03's cable is in rack-b; its label says rack-a


def closed_full_sweep():
    now = timezone.now()
    names = list(LABELS)
    Node.objects.bulk_create(
        Node(name=n, address=f"10.0.0.{k + 1}", last_heartbeat=now, agent_version="1", topology_group=LABELS[n])
        for k, n in enumerate(names)
    )
    nodes = {n.name: n for n in Node.objects.filter(name__in=names)}
    sweep = Sweep.objects.create(
        kind="full", nodes=names, status="finished", verdict="warn", started=now, finished=now, total_rounds=5
    )
    wobble = [1.0, 1.03, 0.98, 1.02, 0.97]
    rows: list[PairProbe] = []
    for i, a in enumerate(names):
        for b in names[i + 1 :]:
            w = wobble[len(rows) % len(wobble)]
            latency, busbw = (12.0, 9.6) if CABLED[a] == CABLED[b] else (41.0, 2.4)
            rows.append(
                PairProbe(
                    sweep=sweep,
                    round=1,
                    node_a=nodes[a],
                    node_b=nodes[b],
                    status="ok",
                    stage="bandwidth",
                    latency_us_p50=latency * w,
                    busbw_gbps=busbw / w,
                )
            )
    PairProbe.objects.bulk_create(rows)
    return sweep


def test_the_topology_page_shows_the_measured_racks_the_mislabelled_node_and_the_tree(viewer_page):
    page, base = viewer_page, viewer_page.base
    sweep = closed_full_sweep()
    page.goto(f"{base}/")
    page.click("nav >> text=Topology")
    page.wait_for_function("() => document.getElementById('topology-plot').dataset.drawn === '6'")
    assert f"from sweep #{sweep.pk}" in page.text_content("h1")
    assert page.text_content("[data-topology-answer]") == "groups"
    assert page.inner_text("[data-group='rack-a'] td:nth-child(3)") == "gpu01 1.00, gpu02 1.00"
    rack_b = page.inner_text("[data-group='rack-b'] td:nth-child(3)")
    assert rack_b == "gpu03 1.00 (labelled rack-a), gpu04 1.00, gpu05 1.00, gpu06 1.00"
    assert page.inner_text("[data-group='rack-b'] td:nth-child(2)") == "rack-a, rack-b"
    mismatch = page.text_content("[data-mismatch='gpu03']")
    assert "gpu03 is labelled rack-a but measures with rack-b: 12 us" in mismatch and "vs 4" in mismatch
    # The figure: both groups outlined on the matrix, the tree's five joins beside it, gpu03 marked.
    shapes = page.evaluate("document.getElementById('topology-plot').layout.shapes.length")
    assert shapes == 2 and page.get_attribute("#topology-plot", "data-groups") == "2"
    assert page.evaluate("document.getElementById('topology-plot').data.filter(t => t.type === 'scatter').length") == 5
    ticks = page.evaluate("document.getElementById('topology-plot').layout.xaxis2.ticktext")
    assert sorted(ticks) == ["gpu01", "gpu02", "gpu03 ⚠", "gpu04", "gpu05", "gpu06"]
    assert page.locator("#topology-plot .heatmaplayer").count() == 1
    shot(page, "topology")
