"""In a real browser, against the real ASGI server, Celery worker and local agents.

Log in, start a sweep from the form, watch cells turn from pending to ok over the
WebSocket without a reload, then open the history and the diff of two sweeps.
Screenshots are kept under test-artifacts/.
"""

import os
import signal
from contextlib import contextmanager

import pytest

from cluster_health.models import Node, Sweep
from devtools.services import wait_until
from tests.support.artifacts import shot
from tests.support.browser import logged_in_page
from tests.support.dashboard_rows import PASSWORD, make_user

pytestmark = [pytest.mark.e2e, pytest.mark.browser, pytest.mark.django_db(transaction=True)]

AGENTS = ("web1", "web2", "web3")


def start_sweep_from_form(page, base, nodes):
    page.goto(base + "/sweeps/new/")
    page.select_option("#id_kind", "connectivity")
    page.select_option("#id_backend", "gloo")
    for name in nodes:
        page.check(f"input[name=nodes][value={name}]")
    page.click("#start-sweep button[type=submit]")
    page.wait_for_url(f"{base}/sweeps/*/")
    return int(page.url.rstrip("/").rsplit("/", 1)[1])


@contextmanager
def agents_held(stack, names):
    """Agents paused (SIGSTOP to their process groups): a sweep's first probes wait until the page is open.

    Warm probes finish a three-node sweep before a page has loaded; held, they cannot.
    Keep it short: a node silent for 6 s is judged offline by the stack.
    """
    groups = [stack.sup.procs[f"agent-{name}"].pid for name in names]
    for pgid in groups:
        os.killpg(pgid, signal.SIGSTOP)
    try:
        yield
    finally:
        for pgid in groups:
            os.killpg(pgid, signal.SIGCONT)


def wait_finished(page, sweep_id, timeout_s=90):
    page.wait_for_function(
        "() => document.querySelector('[data-sweep-status]').dataset.value === 'finished'", timeout=timeout_s * 1000
    )
    assert Sweep.objects.get(pk=sweep_id).status == "finished"


def test_it_follows_a_live_sweep_and_compares_two(stack, chromium):
    make_user("operator", operator=True)
    for name in AGENTS:
        stack.start_agent(name, "127.0.0.1")
    wait_until(
        lambda: Node.objects.filter(Node.online_q(), name__in=AGENTS).count() == len(AGENTS),
        60,
        message="agents online",
    )
    base = stack.start_web()
    context, page = logged_in_page(chromium, base, "operator", PASSWORD)
    try:
        for name in AGENTS:
            assert "online" in page.text_content(f"tr[data-node={name}]")

        with agents_held(stack, AGENTS):
            first = start_sweep_from_form(page, base, AGENTS)
            page.evaluate("window.__noReload = true")
            page.wait_for_function("() => document.body.dataset.loaded && document.body.dataset.ws === 'open'")
            initial = page.evaluate(
                "['web1', 'web2', 'web3'].flatMap((a, i, all) => all.slice(i + 1).map((b) => CH.matrix.statusOf(a, b)))"
            )
            assert any(s in ("pending", "running") for s in initial), initial
            shot(page, "sweep-live")
        page.wait_for_function(
            "() => ['web1', 'web2', 'web3'].every((a, i, all) => all.slice(i + 1).every((b) => CH.matrix.statusOf(a, b) === 'ok'))",
            timeout=90_000,
        )
        assert page.evaluate("window.__noReload === true && CH.lastFrame !== undefined")
        wait_finished(page, first)
        shot(page, "sweep-finished")

        second = start_sweep_from_form(page, base, AGENTS)
        wait_finished(page, second)

        page.goto(base + "/sweeps/")
        page.check(f"tr[data-sweep='{first}'] input[name=a]")
        page.check(f"tr[data-sweep='{second}'] input[name=b]")
        page.click("#compare-form button[type=submit]")
        page.wait_for_function("() => document.body.dataset.loaded === 'diff'")
        assert page.locator(".plot-change .main-svg").count() > 0
        shot(page, "compare")
        page.goto(base + "/")
        page.wait_for_function(f"() => document.body.dataset.loaded === '{second}'")
        shot(page, "overview")
    finally:
        context.close()
        for name in AGENTS:
            stack.stop_agent(name)
