"""The confirmation pass on the live sweep page, in a real browser against the real ASGI server.

A pair that fails in its planned round is probed again before the verdict: the page's
progress says "confirming" meanwhile, and the pair, fine the second time, ends
``transient`` in its cell, with the hint that says both outcomes. Results are played
in-process through the real ingest path, as in test_browser_live.py.
"""

import pytest

from cluster_health import ingest
from cluster_health.models import PairProbe, Sweep
from devtools.sweep_driver import result_for
from tests.support import timing
from tests.support.artifacts import shot
from tests.support.live import running_sweep_page

pytestmark = [pytest.mark.e2e, pytest.mark.browser, pytest.mark.django_db(transaction=True), pytest.mark.timeout(240)]
NAMES = ["cf0", "cf1", "cf2", "cf3"]


def commands_of_running_pairs(sweep_id: int) -> list[dict]:
    """The halves the agents would be asked for now: one per rank of each running pair."""
    out = []
    for pk, a, b in PairProbe.objects.filter(sweep_id=sweep_id, status="running").values_list(
        "pk", "node_a__name", "node_b__name"
    ):
        for rank, node in enumerate((a, b)):
            out.append(
                {
                    "kind": "pair",
                    "probe_id": pk,
                    "sweep_id": sweep_id,
                    "node": node,
                    "rank": rank,
                    "last_stage": "collective",
                    "sizes": [],
                }
            )
    return out


def answer_running(on_server, sweep_id: int, failing: set[str] | None = None) -> None:
    results = []
    for cmd in commands_of_running_pairs(sweep_id):
        probe = PairProbe.objects.select_related("node_a", "node_b").get(pk=cmd["probe_id"])
        pair = {probe.node_a.name, probe.node_b.name}
        if failing and pair == failing:
            results.append(result_for(cmd, status="failed", stage="connect", reason="refused", hint="refused"))
        else:
            results.append(result_for(cmd))
    on_server(ingest.ingest_results, results)


def test_the_page_shows_the_pass_and_a_pair_fine_again_ends_transient(stack, chromium):
    with running_sweep_page(stack, chromium, NAMES, height=900) as live:
        page, sweep, on_server = live.page, live.sweep, live.on_server
        planned = Sweep.objects.get(pk=sweep.pk).params["pair_rounds"]
        for _ in range(planned):
            answer_running(on_server, sweep.pk, failing={"cf0", "cf1"})
        current = Sweep.objects.get(pk=sweep.pk)
        assert current.phase == "confirming" and current.params["confirm_first"] == planned + 1
        page.wait_for_function(
            "() => document.querySelector('[data-progress]').textContent.startsWith('confirming')",
            timeout=timing.PAGE_CELL_MS,
        )
        shot(page, "confirming")
        for _ in range(current.params["confirm_rounds"]):
            answer_running(on_server, sweep.pk)  # fine this time
        done = Sweep.objects.get(pk=sweep.pk)
        assert (done.status, done.verdict) == ("finished", "pass")
        page.wait_for_function("() => CH.matrix.statusOf('cf0', 'cf1') === 'transient'", timeout=timing.PAGE_CELL_MS)
        hint = page.evaluate(
            f"CH.matrix.details[CH.pairIndex(CH.matrix.index.get('cf0'), CH.matrix.index.get('cf1'), {len(NAMES)})]"
        )
        assert "transient, not acted on" in hint[2], hint
        legend = page.text_content(".legend")
        assert "transient" in legend, legend
        shot(page, "transient")
