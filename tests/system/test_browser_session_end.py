"""A live page whose login ended, in a real browser against the real ASGI server: the server closes
its WebSocket (cluster_health/web/consumers.py), and the page says so, with a link to sign in
again, instead of reconnecting for ever."""

import pytest

from tests.support import timing
from tests.support.artifacts import shot
from tests.support.dashboard_rows import PASSWORD, make_nodes, make_sweep

pytestmark = [pytest.mark.e2e, pytest.mark.browser, pytest.mark.django_db(transaction=True), pytest.mark.timeout(120)]

RECONNECT_WINDOW_MS = 2500  # the page's first retry comes 500 ms after a close: several would fall in this


def test_a_logout_in_another_tab_ends_the_live_page_with_a_way_back_in_and_no_retries(viewer_page):
    page, base = viewer_page, viewer_page.base
    sweep = make_sweep(make_nodes(["se0", "se1"]))
    page.goto(f"{base}/sweeps/{sweep.pk}/")
    page.wait_for_function("() => CH.wsState === 'open'", timeout=timing.PAGE_CELL_MS)
    sockets: list[str] = []
    page.on("websocket", lambda ws: sockets.append(ws.url))

    other = page.context.new_page()  # the same browser, another tab: one session
    other.goto(f"{base}/")
    other.click("form[action$='/logout/'] button")
    other.wait_for_url("**/accounts/login/**")
    other.close()

    page.wait_for_function("() => CH.wsState === 'ended'", timeout=timing.PAGE_CELL_MS)
    note = page.locator("[data-session-ended]")
    assert note.inner_text().startswith("Your session ended — sign in again")
    shot(page, "session-ended")
    page.wait_for_timeout(RECONNECT_WINDOW_MS)
    assert sockets == []  # no retry: a closed login cannot be reconnected
    assert page.locator("[data-session-ended]").count() == 1

    note.locator("a").click()  # the way back in lands on the same page, live again
    page.wait_for_url("**/accounts/login/**")
    page.fill("#id_username", "viewer")
    page.fill("#id_password", PASSWORD)
    page.click("button[type=submit]")
    page.wait_for_url(f"{base}/sweeps/{sweep.pk}/")
    page.wait_for_function("() => CH.wsState === 'open'", timeout=timing.PAGE_CELL_MS)
