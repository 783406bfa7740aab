"""No page shows what was not measured: in a real browser against the real ASGI server.

- the pair page's busbw trend has a gap, not a 0 GB/s point, for a probe without a bandwidth stage;
- the compare page says there is nothing to compare when a sweep measured no bandwidth, and never
  widens the page past the viewport;
- the pair page lists each rank's stages in the ladder's order, whatever order the JSON kept.
"""

from datetime import timedelta

import pytest
from django.utils import timezone

from cluster_health.models import PairProbe, Sweep
from tests.support.artifacts import shot
from tests.support.dashboard_rows import make_nodes, make_sweep

pytestmark = [pytest.mark.e2e, pytest.mark.browser, pytest.mark.django_db(transaction=True), pytest.mark.timeout(120)]


def probe(sweep, a, b, busbw, **fields):
    return PairProbe.objects.create(
        sweep=sweep,
        round=1,
        node_a=a,
        node_b=b,
        status="ok",
        stage="bandwidth" if busbw is not None else "collective",
        busbw_gbps=busbw,
        latency_us_p50=150.0,
        finished=sweep.finished,
        **fields,
    )


def sweep_of(kind, minutes_ago, nodes):
    done = timezone.now() - timedelta(minutes=minutes_ago)
    return Sweep.objects.create(
        kind=kind,
        nodes=[n.name for n in nodes],
        status="finished",
        verdict="pass",
        created=done - timedelta(seconds=20),
        started=done - timedelta(seconds=20),
        finished=done,
        total_rounds=1,
        current_round=1,
    )


@pytest.fixture
def page(viewer_page):
    return viewer_page


def test_it_draws_a_probe_without_bandwidth_as_a_gap_in_the_trend(page):
    a, b = make_nodes(["u0", "u1"])
    probe(sweep_of("full", 30, [a, b]), a, b, 2.0)
    probe(sweep_of("connectivity", 20, [a, b]), a, b, None)
    last = probe(sweep_of("full", 10, [a, b]), a, b, 2.5)
    page.goto(f"{page.base}/pairs/u0/u1/?probe={last.pk}")
    page.wait_for_function("() => document.getElementById('trend-plot').data !== undefined")
    assert page.evaluate("document.getElementById('trend-plot').data[0].y") == [2.0, None, 2.5]
    shot(page, "pair-trend-gap")


def test_it_says_there_is_nothing_to_compare_when_a_sweep_measured_no_bandwidth(page):
    nodes = make_nodes(["v0", "v1", "v2"])
    before = make_sweep(nodes, kind="full")
    after = make_sweep(nodes, kind="connectivity")
    PairProbe.objects.filter(sweep=after).update(busbw_gbps=None, stage="collective")
    page.goto(f"{page.base}/sweeps/compare/?a={before.pk}&b={after.pk}")
    page.wait_for_function("() => document.body.dataset.loaded === 'diff'")
    assert "Nothing to compare" in page.text_content(".plot-ratio")
    assert page.locator(".plot-ratio .main-svg").count() == 0
    assert page.locator(".plot-change .main-svg").count() > 0  # the status changes still draw
    assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
    shot(page, "compare-nothing")


def test_it_never_widens_the_compare_page_past_the_viewport(page):
    nodes = make_nodes(["w0", "w1", "w2"])
    before, after = make_sweep(nodes, kind="full"), make_sweep(nodes, kind="full")
    page.set_viewport_size({"width": 1024, "height": 800})
    page.goto(f"{page.base}/sweeps/compare/?a={before.pk}&b={after.pk}")
    page.wait_for_function("() => document.body.dataset.loaded === 'diff'")
    assert page.locator(".plot-ratio .main-svg").count() > 0
    assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")


def test_it_lists_a_ranks_stages_in_the_ladders_order(page):
    a, b = make_nodes(["s0", "s1"])
    half = {
        "status": "ok",
        "stage": "collective",
        "node": "s1",
        "rank": 1,
        "stage_times": {"store": 0.02, "connect": 0.01, "collective": 0.3, "init": 0.2},
    }
    p = probe(sweep_of("connectivity", 5, [a, b]), a, b, None, half_a={**half, "node": "s0", "rank": 0}, half_b=half)
    page.goto(f"{page.base}/pairs/s0/s1/?probe={p.pk}")
    rank1 = page.locator("section.card", has_text="rank 1: s1")
    stages = rank1.locator("table tr td:first-child").all_text_contents()
    assert stages == ["connect", "store", "init", "collective"]
