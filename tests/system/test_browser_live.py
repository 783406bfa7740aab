"""Pages that stay current on their own, in a real browser against the real ASGI server.

- A sweep page open across a restart of the web server reconnects its WebSocket and
  shows the whole state, including results ingested while the server was down.
- The overview's node table follows nodes coming and going without a reload.

Results are played in-process through the real ingest path (devtools/sweep_driver.py),
from a thread of their own: Playwright's event loop owns the test's thread, and
ingest broadcasts over the Redis channel layer as the server worker does.
Screenshots are kept under test-artifacts/.
"""

from datetime import timedelta

import pytest
from django.utils import timezone

from cluster_health import ingest
from cluster_health.models import Node, PairProbe
from devtools.sweep_driver import heartbeat, result_for
from tests.support import timing
from tests.support.artifacts import shot
from tests.support.browser import logged_in_page
from tests.support.dashboard_rows import PASSWORD, make_user
from tests.support.live import running_sweep_page

pytestmark = [pytest.mark.e2e, pytest.mark.browser, pytest.mark.django_db(transaction=True), pytest.mark.timeout(240)]


def page_statuses(page, pairs) -> list:
    return page.evaluate("(pairs) => pairs.map(([a, b]) => CH.matrix.statusOf(a, b))", pairs)


def test_it_shows_what_changed_while_the_web_server_was_down(stack, chromium):
    names = [f"rs{i}" for i in range(6)]
    with running_sweep_page(stack, chromium, names, height=1000) as live:
        page, sweep, on_server = live.page, live.sweep, live.on_server
        first, second, third = (commands for _pk, commands in sorted(live.commands.items()))
        page.evaluate("window.__noReload = true")

        on_server(ingest.ingest_results, [result_for(c) for c in first])
        pair1 = (first[0]["node"], first[1]["node"])
        page.wait_for_function(
            f"() => CH.matrix.statusOf('{pair1[0]}', '{pair1[1]}') === 'ok'", timeout=timing.PAGE_CELL_MS
        )
        shot(page, "restart-before")

        def while_down():
            page.wait_for_function("() => CH.wsState === 'reconnecting'", timeout=timing.PAGE_CELL_MS)
            # Both arrive while no browser can hear of them: one pair ok, one failed,
            # which completes round 1 and starts round 2.
            on_server(
                ingest.ingest_results,
                [result_for(c) for c in second]
                + [
                    result_for(
                        c, status="failed", stage="connect", reason="refused", hint="connection refused by the peer"
                    )
                    for c in third
                ],
            )
            shot(page, "restart-down")

        stack.restart_web(while_down=while_down)
        page.wait_for_function("() => CH.reconnects >= 1 && CH.wsState === 'open'", timeout=timing.PAGE_RECONNECT_MS)

        rows = list(
            PairProbe.objects.filter(sweep=sweep).values_list("node_a__name", "node_b__name", "status").order_by("id")
        )
        pairs = [[a, b] for a, b, _s in rows]
        expected = [s for _a, _b, s in rows]
        assert expected.count("ok") == 2 and expected.count("failed") == 1 and "running" in expected
        page.wait_for_function(
            "([pairs, expected]) => pairs.every(([a, b], k) => CH.matrix.statusOf(a, b) === expected[k])",
            arg=[pairs, expected],
            timeout=timing.PAGE_CELL_MS,
        )
        assert page_statuses(page, pairs) == expected
        assert page.evaluate("window.__noReload") is True  # the same page, never reloaded
        third_pair = (third[0]["node"], third[1]["node"])
        assert page.evaluate(
            f"CH.matrix.details[CH.pairIndex(CH.matrix.index.get('{third_pair[0]}'), "
            f"CH.matrix.index.get('{third_pair[1]}'), {len(names)})]"
        ) == ["connect", "refused", "connection refused by the peer"]
        assert "round 2/" in page.text_content("[data-progress]")
        assert page.text_content("[data-live]") == "live"
        shot(page, "restart-after")


def test_it_keeps_the_node_table_current_without_a_reload(stack, chromium):
    make_user("viewer", operator=False)
    heartbeat("nt1", address="10.9.0.1")
    base = stack.start_web()
    context, page = logged_in_page(chromium, base, "viewer", PASSWORD, height=900)
    try:
        assert "online" in page.text_content("tr[data-node=nt1]")
        assert page.locator("tr[data-node=nt2]").count() == 0
        page.evaluate("window.__noReload = true")

        heartbeat("nt2", address="10.9.0.2")  # a new agent reports
        Node.objects.filter(name="nt1").update(last_heartbeat=timezone.now() - timedelta(minutes=3))  # one fell silent
        page.wait_for_function(
            "() => { const a = document.querySelector('tr[data-node=nt1]'), b = document.querySelector('tr[data-node=nt2]');"
            " return a && b && a.classList.contains('offline') && b.classList.contains('online'); }",
            timeout=timing.PAGE_CELL_MS,
        )
        assert "3 min ago" in page.text_content("tr[data-node=nt1]")
        assert "10.9.0.2" in page.text_content("tr[data-node=nt2]")
        assert page.evaluate("window.__noReload") is True
        shot(page, "overview-nodes-live")
    finally:
        context.close()
