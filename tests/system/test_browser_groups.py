"""The group matrix in a real browser against the real ASGI server.

- A closed sweep over more nodes than a node matrix shows opens on its group matrix; a
  click on a cell draws the node matrix of that cell's two groups, where the failed pair is.
- On a running sweep, the opened group matrix follows results ingested while it is open:
  its cell turns failed, and the drill-down's cell too, without a reload.
Screenshots are kept under test-artifacts/.
"""

import pytest
from django.conf import settings
from django.utils import timezone

from cluster_health import ingest
from cluster_health.models import Node, PairProbe, Sweep
from devtools.sweep_driver import result_for
from tests.support import timing
from tests.support.artifacts import shot
from tests.support.live import running_sweep_page

pytestmark = [pytest.mark.e2e, pytest.mark.browser, pytest.mark.django_db(transaction=True), pytest.mark.timeout(240)]

RACKS, PER_RACK = 11, 96  # 1,056 nodes: more than the 1,024 a node matrix shows by default


def click_cell(page, g, h, groups):
    """Click cell (row g, column h) of the open group matrix, where a person would."""
    box = page.locator("#groups [data-groups-plot] .nsewdrag").bounding_box()
    page.mouse.move(box["x"] + box["width"] * (h + 0.5) / groups, box["y"] + box["height"] * (g + 0.5) / groups)
    page.mouse.click(box["x"] + box["width"] * (h + 0.5) / groups, box["y"] + box["height"] * (g + 0.5) / groups)


def big_closed_sweep():
    now = timezone.now()
    names = [f"rack{g:02d}-n{i:03d}" for g in range(RACKS) for i in range(PER_RACK)]
    Node.objects.bulk_create(
        Node(name=n, address=f"10.{k // 250}.{k % 250}.1", last_heartbeat=now, agent_version="1")
        for k, n in enumerate(names)
    )
    nodes = {n.name: n for n in Node.objects.filter(name__in=names)}
    sweep = Sweep.objects.create(
        kind="sampled", nodes=names, status="finished", verdict="fail", started=now, finished=now, total_rounds=1
    )
    # One sampled round: every node with its neighbour in name order, and one pair that failed.
    rows = [
        PairProbe(
            sweep=sweep, round=1, node_a=nodes[a], node_b=nodes[b], status="ok", busbw_gbps=4.0, stage="bandwidth"
        )
        for a, b in zip(names[0::2], names[1::2], strict=True)
    ]
    rows.append(
        PairProbe(
            sweep=sweep,
            round=1,
            node_a=nodes["rack02-n005"],
            node_b=nodes["rack07-n010"],
            status="failed",
            stage="connect",
            reason="refused",
            hint="the peer refused the store connection",
        )
    )
    PairProbe.objects.bulk_create(rows)
    return sweep


def test_a_sweep_too_large_for_a_node_matrix_opens_on_its_groups_and_drills_down(viewer_page):
    assert settings.NODE_MATRIX_MAX_NODES < RACKS * PER_RACK
    page, base = viewer_page, viewer_page.base
    sweep = big_closed_sweep()
    page.goto(f"{base}/sweeps/{sweep.pk}/")
    page.wait_for_function(f"() => document.getElementById('groups').dataset.loaded === '{sweep.pk}'")
    assert page.is_hidden("#heatmaps")  # no 1,056-node matrix was fetched or drawn
    assert page.evaluate("document.querySelector('[data-groups-details]').open") is True
    note = page.text_content("[data-groups-note]")
    assert "more nodes than the 1024" in note
    assert (
        f"Each node grouped by the default hostname pattern ({RACKS * PER_RACK} nodes)." in note
    )  # no label, none measured
    legend = page.text_content("[data-groups-legend]")
    assert "11 groups" in legend and "failed 1" in legend
    click_cell(page, 2, 7, RACKS)
    page.wait_for_function("() => document.getElementById('groups').dataset.drilled === 'rack02 rack07'")
    assert page.text_content("[data-drill-title]") == "rack02 ↔ rack07"
    assert page.evaluate("CH.groups.drillMatrix.nodes.length") == 2 * PER_RACK
    assert page.evaluate("CH.groups.drillMatrix.bounds") == [PER_RACK]  # a line between the two racks
    assert page.evaluate("CH.groups.drillMatrix.statusOf('rack02-n005', 'rack07-n010')") == "failed"
    assert page.evaluate("CH.groups.drillMatrix.statusOf('rack02-n004', 'rack02-n005')") == "ok"
    shot(page, "groups-drill-down")
    page.click("[data-drill-close]")
    assert page.is_hidden("[data-drill]")


def test_an_open_group_matrix_follows_a_running_sweep(stack, chromium):
    names = [f"gl{g}-n{i}" for g in range(3) for i in range(2)]  # three racks of two
    with running_sweep_page(stack, chromium, names, height=1400) as live:
        page, sweep, rounds, on_server = live.page, live.sweep, live.commands, live.on_server
        page.click("[data-groups-details] summary")
        page.wait_for_function(f"() => document.getElementById('groups').dataset.loaded === '{sweep.pk}'")
        assert page.evaluate("CH.groups.names") == ["gl0", "gl1", "gl2"]
        cross = next(c for c in rounds.values() if {c[0]["node"][:3], c[1]["node"][:3]} == {"gl0", "gl2"})
        a, b = sorted((cross[0]["node"], cross[1]["node"]))
        click_cell(page, 0, 2, 3)
        page.wait_for_function("() => document.getElementById('groups').dataset.drilled === 'gl0 gl2'")
        worst = "CH.groups.codes[CH.groups.worst[CH.groupCellIndex(0, 2, 3)]]"
        assert page.evaluate(worst) in ("pending", "running")
        on_server(
            ingest.ingest_results,
            [result_for(c, status="failed", stage="connect", reason="refused") for c in cross],
        )
        page.wait_for_function(f"() => {worst} === 'failed'", timeout=timing.PAGE_CELL_MS)
        page.wait_for_function(
            f"() => CH.groups.drillMatrix.statusOf('{a}', '{b}') === 'failed'", timeout=timing.PAGE_CELL_MS
        )
        assert page.evaluate(f"CH.matrix.statusOf('{a}', '{b}')") == "failed"  # the node matrix, as before
        shot(page, "groups-live")
