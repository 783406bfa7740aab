"""A gpu sweep of the recorded 8-GPU fleet in a real browser against the real ASGI server: the sweep page's
GPU rows with the slow GPU marked, the node page's GPU table and its GPU x GPU heatmap drawn by plotly.
Screenshots (1400x1000) go to test-artifacts/ (and CLUSTER_HEALTH_SHOTS, where set)."""

import os
from pathlib import Path

import pytest

from agents import contract
from cluster_health import ingest, sweeps
from cluster_health.queues import dispatch
from devtools.sweep_driver import heartbeat
from tests.support import gpu_fleet
from tests.support.artifacts import shot
from tests.support.live import Heartbeats, ServerSide

pytestmark = [pytest.mark.e2e, pytest.mark.browser, pytest.mark.django_db(transaction=True), pytest.mark.timeout(120)]


@pytest.fixture
def page(viewer_page):
    viewer_page.set_viewport_size({"width": 1400, "height": 1000})
    return viewer_page


def keep(page, name: str) -> None:
    shot(page, name)
    if os.environ.get("CLUSTER_HEALTH_SHOTS"):
        folder = Path(os.environ["CLUSTER_HEALTH_SHOTS"])
        folder.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(folder / f"{name}.png"))


def test_an_open_gpu_sweep_page_shows_its_gpus_once_the_checks_close(page):
    fleet = {"gpu-101": "h100_node", "gpu-102": "degraded_pcie"}
    on_server = ServerSide()  # Playwright's event loop owns this thread: server-side calls run in their own
    try:
        with Heartbeats(list(fleet)), dispatch.capture() as sent:
            for name, recording in fleet.items():
                on_server(heartbeat, name, facts=gpu_fleet.facts(recording))
            sweep = on_server(sweeps.request_sweep, source="command", kind="gpu", nodes=list(fleet))
            on_server(sweeps.start_sweep, sweep.pk)
            commands = {kw["command"]["node"]: kw["command"] for task, _, kw, _ in sent if task == contract.TASK_PROBE}
            page.goto(f"{page.base}/sweeps/{sweep.pk}/")
            page.wait_for_function(f"() => document.body.dataset.loaded === '{sweep.pk}' && CH.wsState === 'open'")
            assert page.locator("[data-gpu-row]").count() == 2  # one row per node while its check runs
            assert "checking" in page.text_content('[data-gpu-row="gpu-101"]')
            results = [gpu_fleet.check_result(commands[n], r) for n, r in fleet.items()]
            on_server(lambda: ingest.ingest_results(gpu_fleet.checked_halves(results)))
            page.wait_for_function("() => document.querySelectorAll('[data-gpu-row]').length === 16", timeout=20000)
            assert "degraded" in page.text_content('[data-gpu-row="gpu-102/2"]')
    finally:
        on_server.close()


def test_the_gpu_sweep_page_and_the_node_pages_matrix_in_a_browser(driver, page):
    sweep = gpu_fleet.recorded_sweep(driver)
    page.goto(f"{page.base}/sweeps/{sweep.pk}/")
    page.wait_for_selector("[data-sweep-gpus]")
    assert page.locator("[data-gpu-row]").count() == 8 * 5 + 7
    slow = page.locator('[data-gpu-row="gpu-005/2"] td.slow')
    assert slow.count() == 2 and "13.2" in slow.first.text_content()
    assert page.locator('[data-gpu-row="gpu-001/0"] td.slow').count() == 0
    keep(page, "gpu-sweep")
    page.locator('[data-gpu-row="gpu-004/6"]').scroll_into_view_if_needed()
    keep(page, "gpu-sweep-outlier")

    page.goto(f"{page.base}/nodes/gpu-006/")
    page.wait_for_function("() => document.getElementById('gpu-matrix') && document.getElementById('gpu-matrix').data")
    assert page.locator("[data-gpu-table] tr[data-gpu]").count() == 8
    z = page.evaluate("document.getElementById('gpu-matrix').data[0].z")
    assert z[3][5] < 27 and z[0][1] > 370 and z[2][2] is None
    assert page.locator("#gpu-matrix .main-svg").count() > 0
    page.locator("[data-node-gpus]").scroll_into_view_if_needed()
    keep(page, "gpu-node-matrix")
