"""The health pages tell the truth in Chromium: stored rows on the real ASGI server, no bed needed.

- the Nodes page puts the offline node and the failing ones first, and an operator retires a node from it;
- ages are worded live from one clock (they move, and equal heartbeats read the same everywhere);
- the pair page keeps units as written ("µs", not upper-cased), its stderr inside the page, and marks the
  failed probe on its trend;
- compare opens on the latest two sweeps, with "broke" and "changed" in clearly different colours;
- the report opens with its go/no-go line.
"""

import re
from datetime import timedelta

import pytest
from django.utils import timezone

from cluster_health.models import Node, PairProbe
from tests.support.artifacts import shot
from tests.support.browser import logged_in_page
from tests.support.dashboard_rows import PASSWORD, make_nodes, make_sweep, make_user

pytestmark = [pytest.mark.e2e, pytest.mark.browser, pytest.mark.django_db(transaction=True), pytest.mark.timeout(120)]

TIMEOUT = {"status": "timeout", "stage": "connect", "reason": "connect_timeout", "busbw_gbps": None}
OFFLINE = {"status": "offline", "stage": "resolve", "reason": "agent_offline", "busbw_gbps": None}
SLOW = {"status": "degraded", "reason": "below_baseline", "busbw_gbps": 0.024}
ABSOLUTE = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC$")


@pytest.fixture
def fleet():
    """Four hosts: t4 offline, t1<->t2 blocked, t3 slow; an earlier sweep where t1<->t2 passed."""
    nodes = make_nodes(["t1", "t2", "t3", "t4"])
    Node.objects.filter(name="t4").update(last_heartbeat=timezone.now() - timedelta(hours=1))
    first = make_sweep(nodes, {("t1", "t3"): {"status": "degraded", "busbw_gbps": 1.0}})
    second = make_sweep(
        nodes,
        {
            ("t1", "t2"): TIMEOUT,
            ("t1", "t3"): SLOW,
            ("t2", "t3"): SLOW,
            ("t1", "t4"): OFFLINE,
            ("t2", "t4"): OFFLINE,
            ("t3", "t4"): OFFLINE,
        },
        verdict="fail",
        findings=[("fail", "t4", "t4 is offline"), ("fail", "t1<->t2", "blocked"), ("warn", "t3", "t3 is slow")],
    )
    PairProbe.objects.filter(sweep=second, node_a__name="t1", node_b__name="t2").update(
        half_b={"status": "timeout", "stage": "connect", "stderr_tail": "Traceback: " + "x" * 3000 + "\nTimeoutError\n"}
    )
    return first, second


@pytest.fixture
def operator_page(stack, chromium):
    make_user("op", operator=True)
    base = stack.start_web()
    context, page = logged_in_page(chromium, base, "op", PASSWORD)
    page.base = base
    try:
        yield page
    finally:
        context.close()


def test_the_nodes_page_leads_with_problems_and_an_operator_retires_from_it(operator_page, fleet):
    page = operator_page
    # Online is judged as the page is made, against the stack's 6 s: heard from just now.
    Node.objects.exclude(name="t4").update(last_heartbeat=timezone.now())
    page.goto(f"{page.base}/nodes/")
    rows = page.locator("#node-health tbody tr")
    order = [(rows.nth(i).get_attribute("data-node"), rows.nth(i).get_attribute("data-result")) for i in range(4)]
    assert order == [("t4", "failing"), ("t1", "failing"), ("t2", "failing"), ("t3", "degraded")]
    t3 = page.locator('tr[data-node="t3"]')
    assert "t4 offline" in t3.locator("[data-failing-peers]").inner_text()  # its pair is t4's, not held against t3
    assert "t3 is slow" in t3.locator("[data-findings]").inner_text()
    # This fleet's rows only: the session stack's agents (e0, e1 of the end-to-end tests) may be heard from too.
    ages = page.locator('tr[data-online="true"][data-node^="t"] time[data-ago]').all_inner_texts()
    assert len(ages) == 3 and len(set(ages)) == 1, ages  # one heartbeat time, one clock: one age
    shot(page, "nodes-health")
    page.locator('form[data-retire="t4"] button').click()
    page.wait_for_selector('tr[data-retired-node="t4"]', timeout=10_000)
    assert not Node.objects.get(name="t4").active
    assert page.locator('tr[data-node="t4"]').count() == 0


def test_a_node_page_says_it_is_slow_with_live_ages(operator_page, fleet):
    page = operator_page
    Node.objects.filter(name="t3").update(last_heartbeat=timezone.now())
    page.goto(f"{page.base}/nodes/t3/")
    assert page.get_attribute("[data-node-health]", "data-node-health") == "degraded"
    peers = page.locator("#peer-bandwidth tbody tr, #peer-bandwidth tr[data-peer]")
    statuses = {peers.nth(i).get_attribute("data-peer"): peers.nth(i).get_attribute("data-status") for i in range(3)}
    assert statuses == {"t1": "degraded", "t2": "degraded", "t4": "offline"}
    heartbeat = page.locator("[data-heartbeat] time")
    first = heartbeat.inner_text()
    assert re.fullmatch(r"\d+ s ago", first), first  # seconds, never "0 minutes ago"
    page.wait_for_function(
        "(was) => document.querySelector('[data-heartbeat] time').textContent !== was", arg=first, timeout=5_000
    )
    for text in page.locator("time:not([data-ago])").all_inner_texts():
        assert ABSOLUTE.match(text), text
    shot(page, "node-slow")


def test_the_pair_page_keeps_units_and_its_stderr_inside_the_page(operator_page, fleet):
    page = operator_page
    page.goto(f"{page.base}/pairs/t1/t2/")
    heading = page.locator("th", has_text="latency")
    assert heading.inner_text() == "latency (µs)"  # as rendered: no text-transform
    assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
    assert page.evaluate(
        "(() => { const p = document.querySelector('pre.stderr'); return p.scrollWidth <= p.clientWidth; })()"
    )
    page.wait_for_function("() => document.getElementById('trend-plot').data !== undefined")
    failed = page.evaluate("document.getElementById('trend-plot').data[1]")
    assert failed["name"] == "did not work" and len(failed["x"]) == 1 and "timeout at connect" in failed["text"][0]
    assert page.evaluate("document.getElementById('trend-plot').layout.xaxis.title.text") == "finished (UTC)"
    shot(page, "pair-truth")


def test_compare_opens_on_the_latest_two_and_the_report_on_its_gate(operator_page, fleet):
    first, second = fleet
    page = operator_page
    page.goto(f"{page.base}/sweeps/compare/")
    page.wait_for_function("() => document.body.dataset.loaded === 'diff'")
    assert page.locator("select[name=a]").input_value() == str(first.pk)
    assert page.locator("select[name=b]").input_value() == str(second.pk)
    colours = page.evaluate(
        "Object.fromEntries([...document.querySelectorAll('#diff .legend .swatch-item')]"
        ".map((el) => [el.textContent.trim(), getComputedStyle(el.querySelector('.swatch')).backgroundColor]))"
    )
    broke, changed = (tuple(map(int, re.findall(r"\d+", colours[k]))) for k in ("broke", "changed"))
    assert sum((x - y) ** 2 for x, y in zip(broke, changed)) ** 0.5 > 150, colours
    assert "t1 ↔ t2" in page.locator("[data-broke]").inner_text()
    assert "t2 ↔ t3: ok → degraded" in page.locator("[data-regressed]").inner_text()  # still works, now slow
    shot(page, "compare-default")
    page.goto(f"{page.base}/sweeps/{second.pk}/report/?before={first.pk}")
    gate = page.locator("main > p.go-no-go")
    assert gate.get_attribute("data-go-no-go") == "no-go" and gate.inner_text().startswith("NO-GO")
    rows = page.locator("#status-counts tr[data-status]")
    assert rows.first.get_attribute("data-status") == "offline" and "" not in rows.all_inner_texts()
    shot(page, "report-gate")


def test_an_operator_schedules_a_sweep_from_the_schedules_page(operator_page):
    from cluster_health import defaults

    make_nodes(["u1", "u2"])
    defaults.ensure_schedules()
    page = operator_page
    page.goto(f"{page.base}/schedules/")
    assert page.locator("tr[data-schedule]").evaluate_all("(rows) => rows.map((r) => r.dataset.schedule)") == [
        defaults.NIGHTLY_TASK_NAME
    ]  # the reaper and prune are the product's own
    page.click("text=Add a schedule")
    page.fill("#id_name", "rack u hourly")
    page.select_option("#id_kind", "connectivity")
    page.fill("#id_nodes", "u1, u2")
    page.fill("#id_cron", "15 * * * *")
    page.click("#schedule-form button[type=submit]")
    row = page.locator('tr[data-schedule="rack u hourly"]')
    row.wait_for(timeout=10_000)
    assert row.locator("[data-cron]").inner_text() == "15 * * * *"
    next_run = row.locator("[data-next-run] time").inner_text()
    assert ABSOLUTE.match(next_run) and next_run[14:16] == "15", next_run
    row.locator("text=Edit").click()
    page.uncheck("#id_enabled")
    page.click("#schedule-form button[type=submit]")
    page.locator('tr[data-schedule="rack u hourly"] [data-enabled]').wait_for(timeout=10_000)
    assert page.locator('tr[data-schedule="rack u hourly"] [data-enabled]').inner_text() == "no (disabled)"
    shot(page, "schedules")
