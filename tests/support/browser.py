"""One headless Debian chromium per test session, driven by Playwright (never downloads a browser)."""

from __future__ import annotations

import os
import re
import shutil

import pytest

from devtools.browser import ARGS, CHROMIUM
from devtools.environ import restore_env


@pytest.fixture(scope="session")
def chromium():
    if not shutil.which(CHROMIUM):
        pytest.fail(f"{CHROMIUM} is missing: run scripts/setup --with-browser")
    # Playwright's sync API runs an event loop in this thread; the ORM calls the tests make
    # between page actions are plain synchronous ones. conftest runs browser tests last, and
    # the variable is removed again so no later subprocess inherits it.
    previous = os.environ.get("DJANGO_ALLOW_ASYNC_UNSAFE")
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
    from playwright.sync_api import sync_playwright

    try:
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=ARGS)
            try:
                yield browser
            finally:
                browser.close()
    finally:
        restore_env("DJANGO_ALLOW_ASYNC_UNSAFE", previous)


@pytest.fixture
def viewer_page(stack, chromium):
    """A browser page on the real ASGI server, logged in as a viewer; ``page.base`` is the server's URL."""
    from tests.support.dashboard_rows import PASSWORD, make_user

    make_user("viewer", operator=False)
    base = stack.start_web()
    context = chromium.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    log_in(page, base, "viewer", PASSWORD)
    page.base = base
    try:
        yield page
    finally:
        context.close()


def log_in(page, base_url: str, username: str, password: str) -> None:
    page.goto(base_url + "/")
    page.fill("#id_username", username)
    page.fill("#id_password", password)
    page.click("button[type=submit]")
    page.wait_for_url(base_url + "/")


def logged_in_page(chromium, base_url: str, username: str, password: str, height: int = 1000):
    """A page in a fresh browser context, logged in: (context, page), the context for the caller to close."""
    context = chromium.new_context(viewport={"width": 1400, "height": height})
    try:
        page = context.new_page()
        log_in(page, base_url, username, password)
    except BaseException:
        context.close()
        raise
    return context, page


# The colour of cell (a, b) of the figure on screen: the top trace that paints it, through its colour scale.
CELL_COLOUR = """([a, b]) => {
  const el = document.getElementById('plot'), m = CH.matrix;
  const r = m.plot.pos[m.index.get(a)], c = m.plot.pos[m.index.get(b)];
  for (const t of [...el.data].reverse()) {
    const v = t.z[r][c];
    if (v === null || Number.isNaN(v)) continue;
    if (!Array.isArray(t.colorscale)) return 'scale:' + t.colorscale;
    const f = (v - t.zmin) / (t.zmax - t.zmin);
    return t.colorscale.find(([at], k, all) => f >= at && f <= all[k + 1 === all.length ? k : k + 1][0])[1];
  }
  return null;
}"""

# A time as every page writes it: absolute, 24-hour, its zone named (cluster_health/web/times.py).
ABSOLUTE = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d [A-Z][A-Za-z0-9+-]*$")


def show_view(page, view: str) -> None:
    """Pick a view of the sweep matrix (status, busbw, latency) and wait until its figure is drawn."""
    traces = 1 if view == "status" else 2  # a figure view draws the kept statuses over its scale
    page.click(f"#heatmaps [data-view={view}]")
    page.wait_for_function(
        f"() => CH.matrix.view === '{view}' && (document.getElementById('plot').data || []).length === {traces}"
    )
