"""The sweep page and the overview tell the truth at a glance: in a real browser against the real ASGI server.

Rows of the namespace bed's six-host faults (tests/support/six_hosts.py), with the findings the sweep's
own rules make of them:
- each cell's colour (read from the rendered figure's data) is its pair's status colour, on the
  throughput and latency views too for failed, timeout and offline cells; each view has its legend;
- the findings blame the firewalled link and the offline node, never their common peer; each one's
  "why" link opens its page, and hovering it lights its cells;
- no one-group "host" panel; the live badge only on an open sweep, whose verdict reads "running"
  while the last complete sweep stays readable beside it;
- "Start a sweep" lists every active node, the offline one marked, as "none ticked" means.
Screenshots go to test-artifacts/ (CLUSTER_HEALTH_TEST_ARTIFACTS).
"""

from datetime import timedelta

import pytest
from django.utils import timezone

from cluster_health.models import Finding, Node
from cluster_health.sweeps import findings
from tests.support.artifacts import shot
from tests.support.browser import CELL_COLOUR, logged_in_page, show_view
from tests.support.dashboard_rows import PASSWORD, make_nodes, make_sweep, make_user
from tests.support.live import running_sweep_page
from tests.support.six_hosts import SIX, six_host_pairs

pytestmark = [pytest.mark.e2e, pytest.mark.browser, pytest.mark.django_db(transaction=True), pytest.mark.timeout(120)]


def six_host_sweep(status="finished"):
    nodes = make_nodes(SIX)
    Node.objects.filter(name="host5").update(last_heartbeat=timezone.now() - timedelta(hours=1))
    pairs = six_host_pairs()
    results = {
        (p["a"], p["b"]): {
            "status": p["status"],
            "stage": p["stage"],
            "reason": p["reason"],
            "busbw_gbps": p["busbw_gbps"],
            "latency_us_p50": 150.0 if p["busbw_gbps"] else None,
        }
        for p in pairs
    }
    sweep = make_sweep(nodes, results, status=status, verdict="fail", kind="full")
    for f in findings._matrix_findings(SIX, pairs, {"host5"}, {}, {}):
        Finding.objects.create(
            sweep=sweep,
            pairs=f.get("pairs") or [],
            detail=f.get("detail") or {},
            **{k: f[k] for k in ("severity", "code", "subject", "text")},
        )
    return nodes, sweep


@pytest.fixture
def page(viewer_page):
    viewer_page.set_viewport_size({"width": 1400, "height": 1000})
    viewer_page.evaluate("localStorage.clear()")
    return viewer_page


def test_it_paints_every_cell_as_its_status_on_every_view_and_blames_right(page):
    _, sweep = six_host_sweep()
    page.goto(f"{page.base}/")
    page.wait_for_function(f"() => document.body.dataset.loaded === '{sweep.pk}'")
    shot(page, "truth-overview")
    page.goto(f"{page.base}/sweeps/{sweep.pk}/")
    page.wait_for_function(f"() => document.body.dataset.loaded === '{sweep.pk}'")
    colours = page.evaluate("CH.STATUS_COLORS")
    shot(page, "truth-sweep-status")

    # Status view: each cell is its status's colour, and its tooltip says the same status.
    for a, b, status in (("host1", "host2", "timeout"), ("host4", "host5", "offline"), ("host3", "host4", "ok")):
        assert page.evaluate(CELL_COLOUR, [a, b]) == colours[status]
        assert page.evaluate(f"CH.matrix.statusOf('{a}', '{b}')") == status
        i, j = page.evaluate(f"[CH.matrix.index.get('{a}'), CH.matrix.index.get('{b}')]")
        assert f"status: <b>{status}</b>" in page.evaluate(f"CH.matrix.hoverText({i}, {j})")
    # host3's links pass but are 17x slower: their green cells carry the finding's mark and its words.
    marks = page.evaluate(
        """(pairs) => pairs.map(([a, b]) => { const m = CH.matrix;
             return document.getElementById('plot').data[0].text[m.plot.pos[m.index.get(a)]][m.plot.pos[m.index.get(b)]]; })""",
        [["host3", "host4"], ["host1", "host3"], ["host4", "host6"]],
    )
    assert marks == ["!", "!", ""]
    i, j = page.evaluate("[CH.matrix.index.get('host3'), CH.matrix.index.get('host4')]")
    assert "every link of host3 is slow" in page.evaluate(f"CH.matrix.hoverText({i}, {j})")
    legend = page.text_content("#heatmaps .legend")
    assert "ok 9" in legend and "timeout 2" in legend and "offline 4" in legend

    # Throughput and latency: the failed, timed-out and offline cells keep their colours; their own legends.
    for view, scale in (("busbw", "GB/s"), ("latency", "µs")):
        show_view(page, view)
        shot(page, f"truth-sweep-{view}")
        assert page.evaluate(CELL_COLOUR, ["host1", "host2"]) == colours["timeout"]
        assert page.evaluate(CELL_COLOUR, ["host2", "host5"]) == colours["timeout"]
        assert page.evaluate(CELL_COLOUR, ["host1", "host5"]) == colours["offline"]
        assert page.evaluate(CELL_COLOUR, ["host3", "host4"]).startswith("scale:")
        legend = page.text_content("#heatmaps .legend")
        assert scale in legend and "offline" in legend and "ok" not in legend.split()
        assert page.locator("#heatmaps .legend [data-status=ok], #heatmaps .legend [data-status=degraded]").count() == 0
    show_view(page, "status")

    # Blame: the link and the dead node, never their common peer; host3's slowness is a finding.
    items = page.locator("[data-findings] li")
    texts = items.all_text_contents()
    assert any(t.startswith("fail host1<->host2") for t in texts), texts
    assert any(t.startswith("fail host5") and "offline" in t for t in texts), texts
    assert any(t.startswith("warn host3") and "slow" in t for t in texts), texts
    assert not any("common factor" in t for t in texts), texts

    # Hovering a finding lights its cells; the node's finding lights all of the node's pairs.
    link = page.locator("[data-findings] li", has_text="host1<->host2")
    link.hover()
    page.wait_for_function("() => document.getElementById('heatmaps').dataset.lit === 'host1<->host2'")
    lit = page.evaluate("document.getElementById('plot').layout.shapes.filter((s) => s.name === 'lit').length")
    assert lit == 2  # the cell and its mirror
    page.locator("[data-findings] li", has_text="host5 went offline").click()
    page.wait_for_function("() => document.getElementById('heatmaps').dataset.lit.split(' ').length === 5")
    shot(page, "truth-finding-lit")

    # A closed sweep: no live badge, no one-group panel over a fleet without topology groups.
    assert page.is_hidden("#heatmaps [data-live]")
    assert page.is_hidden("#groups")

    # Every finding's "why" leads to its page.
    whys = page.locator("[data-findings] li a.why")
    assert whys.count() == len(texts)
    link.locator("a.why").click()
    page.wait_for_url(f"{page.base}/sweeps/{sweep.pk}/findings/*/")
    assert "host1<->host2" in page.text_content("body")


def test_a_running_sweep_reads_running_beside_the_last_complete_one(stack, chromium):
    _, done = six_host_sweep()
    with running_sweep_page(stack, chromium, SIX, height=1000) as live:
        page, running = live.page, live.sweep
        for where in (f"/sweeps/{running.pk}/", "/"):  # the sweep page, then the overview following it
            page.goto(base_of(page) + where)
            page.wait_for_function(
                f"() => document.body.dataset.loaded === '{running.pk}'"
                f" && document.getElementById('last-complete').dataset.loaded === '{done.pk}'"
            )
            assert page.text_content("[data-verdict]") == "running"
            assert "unknown" not in page.inner_text(".page-head").lower()
            assert page.is_visible("#heatmaps [data-live]")
            findings_text = page.text_content("[data-findings]")
            assert "still running" in findings_text and "Nothing to report" not in findings_text
            # The last complete sweep: its matrix and findings, readable while the new one runs.
            last = page.locator("#last-complete")
            assert last.is_visible()
            assert last.locator("[data-last-link]").text_content() == f"#{done.pk}"
            assert page.evaluate("CH.lastComplete.matrix.statusOf('host1', 'host2')") == "timeout"
            assert last.locator("[data-last-findings] li", has_text="host5 went offline").count() == 1
            assert last.locator("a.why").count() == Finding.objects.filter(sweep=done).count()
        shot(page, "truth-overview-running")


def base_of(page) -> str:
    """The server's URL, from the page's own."""
    scheme, rest = page.url.split("://", 1)
    return f"{scheme}://{rest.split('/', 1)[0]}"


def test_start_a_sweep_lists_every_node_that_none_ticked_means(stack, chromium):
    make_user("operator", operator=True)
    make_nodes(["host1", "host2", "host3"])
    make_nodes(["host5"], online=False)
    context, page = logged_in_page(chromium, stack.start_web(), "operator", PASSWORD)
    try:
        # Heard from just now: a slow browser start must not make them offline (NODE_ONLINE_AFTER_S) first.
        Node.objects.filter(name__in=["host1", "host2", "host3"]).update(last_heartbeat=timezone.now())
        page.goto(page.url + "sweeps/new/")
        boxes = page.locator("#start-sweep label.check")
        labels = [t.strip() for t in boxes.all_text_contents()]
        # The session stack's own agents (e0, e1 of the end-to-end tests) may be offered too: this test's nodes.
        ours = [label for label in labels if label.startswith("host")]
        assert ours == ["host1", "host2", "host3", "host5 (offline)"]
        assert "none ticked: every active node" in page.text_content("#start-sweep")
    finally:
        context.close()


def test_a_group_cell_says_how_many_of_its_pairs_are_bad(page):
    nodes = make_nodes(["rack1-n1", "rack1-n2", "rack2-n1"]) + make_nodes(["rack2-n2"], online=False)
    down = {"status": "offline", "stage": None, "reason": "agent_offline", "busbw_gbps": None}
    sweep = make_sweep(nodes, {(n.name, "rack2-n2"): down for n in nodes}, verdict="fail")
    page.goto(f"{page.base}/sweeps/{sweep.pk}/")
    page.wait_for_function(f"() => document.body.dataset.loaded === '{sweep.pk}'")
    assert page.is_visible("#groups")
    page.click("[data-groups-details] summary")
    page.wait_for_function(f"() => document.getElementById('groups').dataset.loaded === '{sweep.pk}'")
    assert page.evaluate("CH.groups.names") == ["rack1", "rack2"]
    text = page.evaluate("document.querySelector('#groups [data-groups-plot]').data[0].text")
    assert text == [["", "2/4"], ["2/4", "1/1"]]  # rack1 inside all ok; one node of rack2 down
    assert "failing/probed" in page.text_content("[data-groups-legend]")
    shot(page, "truth-groups")
    # Median busbw: rack2's inside measured nothing and keeps its status colour; the scale has its own legend.
    page.click("#groups [data-group-view=busbw]")
    plot = "document.querySelector('#groups [data-groups-plot]')"
    page.wait_for_function(f"() => CH.groups.view === 'busbw' && ({plot}.data || []).length === 2")
    over = page.evaluate(
        f"{plot}.data[1].z.map((row) => Array.from(row, (v) => (v === null || Number.isNaN(v) ? null : CH.groups.codes[v])))"
    )
    assert over == [[None, None], [None, "offline"]]
    legend = page.text_content("[data-groups-legend]")
    assert "GB/s" in legend and page.locator("[data-groups-legend] [data-status=ok]").count() == 0
