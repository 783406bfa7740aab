"""What the heatmap's colours and marks say, read from the figure plotly drew, in a real browser.

- The throughput and latency scales are anchored: busbw from 0 to the fleet's expected busbw (the
  baseline), else the fastest healthy pair; latency from 0 to 3x the healthy median. A healthy
  sweep's cells sit at the fast end, and one figure keeps its colour from sweep to sweep.
- The legend counts timeouts and offline pairs among the failures; "!" marks exactly the pairs a fail
  or warn finding names; a transient pair (fine when probed again) is unmarked, pale green, far from
  the failure colours.
"""

import re

import pytest

from cluster_health.models import Baseline, BaselinePair, Finding, PairProbe
from tests.support.browser import CELL_COLOUR, show_view
from tests.support.dashboard_rows import make_nodes, make_sweep
from tests.system.test_browser_sweep_truth import six_host_sweep

pytestmark = [pytest.mark.e2e, pytest.mark.browser, pytest.mark.django_db(transaction=True), pytest.mark.timeout(120)]

# A cell as plotly drew it: its value, and where it falls on the colour range plotly used (0 to 1).
CELL = """([a, b]) => {
  const el = document.getElementById('plot'), m = CH.matrix, t = el._fullData[0];
  const v = el.data[0].z[m.plot.pos[m.index.get(a)]][m.plot.pos[m.index.get(b)]];
  return {value: v, zmin: t.zmin, zmax: t.zmax, at: Math.min(1, (v - t.zmin) / (t.zmax - t.zmin))};
}"""
MARK = """([a, b]) => { const m = CH.matrix;
  return document.getElementById('plot').data[0].text[m.plot.pos[m.index.get(a)]][m.plot.pos[m.index.get(b)]]; }"""


def open_sweep(page, sweep):
    page.goto(f"{page.base}/sweeps/{sweep.pk}/")
    page.wait_for_function(f"() => document.body.dataset.loaded === '{sweep.pk}'")


def four_host_sweep(nodes, busbw, latency=None, **kw):
    """A passing sweep; ``busbw[(a, b)]`` and ``latency[(a, b)]`` override a pair's 0.42 GB/s and 400 µs."""
    results = {}
    for i, a in enumerate(nodes):
        for b in nodes[i + 1 :]:
            key = (a.name, b.name)
            results[key] = {"busbw_gbps": busbw.get(key, 0.42), "latency_us_p50": (latency or {}).get(key, 400.0)}
    return make_sweep(nodes, results, kind="full", **kw)


def test_a_healthy_sweep_reads_healthy_and_a_figure_keeps_its_colour(viewer_page):
    page = viewer_page
    nodes = make_nodes(["host1", "host2", "host3", "host4"])
    noisy = {("host1", "host2"): 690.0, ("host3", "host4"): 395.0}
    plain = four_host_sweep(nodes, {("host1", "host2"): 0.45}, noisy)
    open_sweep(page, plain)
    # The header says when it ended and how long ago, as rewritten from state.json by the page's script.
    ended = page.locator("[data-sweep-ended]")
    assert ended.is_visible() and re.fullmatch(
        r"ended \d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC, \d+ s ago", ended.inner_text()
    )
    show_view(page, "busbw")
    cell = page.evaluate(CELL, ["host1", "host3"])
    # From 0 (not the sweep's minimum) to its fastest healthy pair: 0.42 of 0.45 is near the fast end.
    assert (cell["zmin"], round(cell["zmax"], 3)) == (0, 0.45) and cell["at"] > 0.9, cell
    assert "from 0 to 0.45 (the fastest healthy pair)" in page.text_content("#heatmaps .legend")
    show_view(page, "latency")
    noisiest = page.evaluate(CELL, ["host1", "host2"])
    assert noisiest["zmin"] == 0 and noisiest["zmax"] == pytest.approx(1200.0), noisiest  # 3 x the median 400 µs
    assert noisiest["at"] < 0.6, noisiest  # 1.7x its peers is a shade darker, not the darkest

    # With a baseline, the scale is the fleet's expected busbw: the same 0.42 GB/s has the same colour in
    # a sweep whose fastest pair is 0.60 and in one whose fastest is 0.45.
    base = Baseline.objects.create(name="nightly", source="rolling")
    for i, a in enumerate(nodes):
        for b in nodes[i + 1 :]:
            BaselinePair.objects.create(baseline=base, node_a=a.name, node_b=b.name, busbw_gbps=0.5)
    seen = []
    for fastest in (0.60, 0.45):
        sweep = four_host_sweep(nodes, {("host1", "host2"): fastest}, baseline=base)
        open_sweep(page, sweep)
        show_view(page, "busbw")
        seen.append(page.evaluate(CELL, ["host3", "host4"]))
        assert "from 0 to 0.50 (the fleet's expected busbw (its baseline))" in page.text_content("#heatmaps .legend")
    assert [(c["zmin"], c["zmax"]) for c in seen] == [(0, 0.5), (0, 0.5)]
    assert seen[0]["at"] == seen[1]["at"] == pytest.approx(0.84, abs=0.01)
    show_view(page, "status")


def test_failures_are_counted_and_marked_and_a_transient_pair_is_neither(viewer_page):
    page = viewer_page
    _, sweep = six_host_sweep()
    PairProbe.objects.filter(sweep=sweep, node_a__name="host4", node_b__name="host6").update(status="transient")
    Finding.objects.create(
        sweep=sweep,
        severity="info",
        code="transient",
        subject="host4<->host6",
        text="host4<->host6 slow once, normal when probed again: transient, not acted on",
        pairs=["host4<->host6"],
    )
    open_sweep(page, sweep)
    colours = page.evaluate("CH.STATUS_COLORS")

    legend = page.locator("#heatmaps .legend")
    assert legend.locator("[data-failures]").get_attribute("data-failures") == "6"
    assert legend.text_content().startswith("failures 6:")
    # The failures first, under their total; no "failed 0" beside the pink cells.
    assert legend.locator(".swatch-item").all_text_contents() == ["timeout 2", "offline 4", "ok 8", "transient 1"]

    named = {
        ("host1", "host2"): "!",  # fail: the firewalled link (timeout)
        ("host1", "host5"): "!",  # fail: host5 went offline
        ("host2", "host5"): "!",
        ("host3", "host4"): "!",  # warn: every link of host3 is slow
        ("host1", "host3"): "!",
        ("host4", "host6"): "",  # transient: an info finding, not a problem
        ("host1", "host4"): "",
    }
    assert {pair: page.evaluate(MARK, list(pair)) for pair in named} == named

    def rgb(hex_colour):
        return [int(hex_colour[k : k + 2], 16) for k in (1, 3, 5)]

    def apart(x, y):
        return sum((p - q) ** 2 for p, q in zip(rgb(x), rgb(y), strict=True)) ** 0.5

    transient = colours["transient"]
    assert page.evaluate(CELL_COLOUR, ["host4", "host6"]) == transient
    assert min(apart(transient, colours[s]) for s in ("failed", "timeout", "offline", "degraded")) > 100
    assert apart(transient, colours["failed"]) > 200 and apart(transient, "#e69f00") > 150  # not the amber of old
