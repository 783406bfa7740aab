"""The history charts of the node and pair pages, drawn in a real browser with no script error.

Three stored sweeps over four nodes with a baseline: healthy, then h1<->h3 slow and h1<->h4 offline,
then healthy again. The node page draws h1's links per sweep (median, slowest to fastest, a bar per
status in its colour) and the pair page h1<->h3's probes; both axes run from 0 past the fleet's
expected busbw, drawn as a dashed line, as the heatmaps' colours are anchored.
"""

from datetime import timedelta

import pytest
from django.core.cache import cache

from cluster_health.models import Baseline, BaselinePair
from tests.support.artifacts import shot
from tests.support.dashboard_rows import make_nodes
from tests.support.history_rows import sweeps_over

pytestmark = [pytest.mark.e2e, pytest.mark.browser, pytest.mark.django_db(transaction=True), pytest.mark.timeout(120)]

NAMES = ["h1", "h2", "h3", "h4"]
SLOW = {"status": "degraded", "reason": "below_baseline", "busbw_gbps": 0.2}
OFFLINE = {"status": "offline", "stage": "resolve", "reason": "agent_offline", "busbw_gbps": None}


def three_sweeps():
    nodes = make_nodes(NAMES)
    base = Baseline.objects.create(name="nightly", source="rolling")
    BaselinePair.objects.bulk_create(
        BaselinePair(baseline=base, node_a=a, node_b=b, busbw_gbps=2.5)
        for i, a in enumerate(NAMES)
        for b in NAMES[i + 1 :]
    )
    cache.clear()  # the expected busbw is cached per baseline id, which a flushed database hands out again
    slow_then_offline = {("h1", "h3"): SLOW, ("h1", "h4"): OFFLINE}
    return sweeps_over(
        nodes, 3, lambda k: slow_then_offline if k == 1 else {}, timedelta(hours=1), baseline=base, kind="full"
    )


def drawn(page, plot: str) -> dict:
    page.wait_for_function(f"() => document.getElementById('{plot}').dataset.drawn !== undefined")
    return page.evaluate(
        f"""() => {{ const el = document.getElementById('{plot}');
          return {{ traces: el.data.map((t) => ({{ name: t.name, type: t.type || 'scatter', y: t.y, color: t.marker && t.marker.color }})),
                   range: el.layout.yaxis.range, shapes: el.layout.shapes.map((s) => s.y0) }}; }}"""
    )


def test_the_node_and_pair_pages_draw_their_history(viewer_page):
    page, errors = viewer_page, []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    sweeps = three_sweeps()
    colours = None

    page.goto(f"{page.base}/nodes/h1/")
    chart = drawn(page, "node-history-plot")
    colours = page.evaluate("CH.STATUS_COLORS")
    median = next(t for t in chart["traces"] if t["name"] == "median of its links")
    assert median["y"] == [2.0, 1.1, 2.0]  # the second: of 2.0 (h2) and 0.2 (h3); h4 offline measured nothing
    bars = {t["name"]: (t["y"], t["color"]) for t in chart["traces"] if t["type"] == "bar"}
    assert bars == {"ok": ([3, 1, 3], colours["ok"]), "offline": ([0, 1, 0], colours["offline"]),
                    "degraded": ([0, 1, 0], colours["degraded"])}  # fmt: skip
    assert chart["shapes"] == [2.5] and chart["range"][0] == 0 and chart["range"][1] >= 2.5
    assert "the fleet's expected busbw, 2.500 GB/s" in page.text_content("[data-node-history]")
    shot(page, "history-node")

    page.goto(f"{page.base}/pairs/h1/h3/")
    chart = drawn(page, "trend-plot")
    assert chart["traces"][0]["y"] == [2.0, 0.2, 2.0]
    assert chart["traces"][0]["color"] == [colours["ok"], colours["degraded"], colours["ok"]]
    assert chart["shapes"] == [2.5] and chart["range"][0] == 0 and chart["range"][1] >= 2.5
    assert "Its last 3 sweeps" in page.text_content("[data-pair-history]")
    shot(page, "history-pair")

    # A click on a sweep of the node's chart opens that sweep.
    page.goto(f"{page.base}/nodes/h1/")
    drawn(page, "node-history-plot")
    click = f"() => document.getElementById('node-history-plot').emit('plotly_click', {{ points: [{{ x: '#{sweeps[1].pk}' }}] }})"
    page.evaluate(click)
    page.wait_for_url(f"{page.base}/sweeps/{sweeps[1].pk}/")
    assert errors == []
