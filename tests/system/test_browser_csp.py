"""In a real browser: the pages draw their heatmaps and plots under the Content-Security-Policy, refused nothing.

A violation would mean a script the policy blocks (an inline one without the nonce, an
eval in plotly.js): the page would look fine in tests without the header and break in use.
"""

import pytest

from cluster_health.models import PairProbe
from tests.support.artifacts import shot
from tests.support.dashboard_rows import make_nodes, make_sweep

pytestmark = [pytest.mark.e2e, pytest.mark.browser, pytest.mark.django_db(transaction=True), pytest.mark.timeout(120)]

RECORD_VIOLATIONS = """
window.__csp = [];
document.addEventListener("securitypolicyviolation", (e) => window.__csp.push(`${e.violatedDirective} ${e.blockedURI}`));
"""


@pytest.fixture
def page(viewer_page):
    """The viewer's page, recording CSP violations (events and console errors) on every page it opens next."""
    viewer_page.context.add_init_script(RECORD_VIOLATIONS)
    viewer_page.console_errors = []
    viewer_page.on("console", lambda msg: msg.type == "error" and viewer_page.console_errors.append(msg.text))
    return viewer_page


def refused(page) -> list[str]:
    return page.evaluate("window.__csp") + [e for e in page.console_errors if "Content Security Policy" in e]


def test_the_dashboard_pages_draw_their_heatmaps_with_no_csp_violation(page):
    nodes = make_nodes(["p0", "p1", "p2", "p3"])
    before = make_sweep(nodes, kind="full")
    after = make_sweep(nodes, kind="full")
    probe = PairProbe.objects.filter(sweep=after, node_a__name="p0", node_b__name="p1").get()

    for url, drawn in [
        ("/", f"document.body.dataset.loaded === '{after.pk}'"),
        (f"/sweeps/{after.pk}/", f"document.body.dataset.loaded === '{after.pk}'"),
        (f"/sweeps/compare/?a={before.pk}&b={after.pk}", "document.body.dataset.loaded === 'diff'"),
        (f"/pairs/p0/p1/?probe={probe.pk}", "document.getElementById('trend-plot').data !== undefined"),
    ]:
        page.goto(page.base + url)
        page.wait_for_function(f"() => {drawn}")
        assert page.locator(".main-svg").count() > 0, url
        assert refused(page) == [], url
    shot(page, "csp-pair")

    page.goto(f"{page.base}/sweeps/{after.pk}/")
    page.wait_for_function(f"() => document.body.dataset.loaded === '{after.pk}'")
    assert page.evaluate("document.querySelectorAll('#heatmaps .main-svg').length") > 0
    shot(page, "csp-sweep")


def test_an_injected_inline_script_is_refused(page):
    page.goto(page.base + "/")
    page.evaluate(
        """() => { const s = document.createElement("script"); s.textContent = "window.__ran = true";
                   document.body.appendChild(s); }"""
    )
    assert page.evaluate("window.__ran === undefined")
    assert any(v.startswith("script-src") for v in page.evaluate("window.__csp"))
