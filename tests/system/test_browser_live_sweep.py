"""A sweep started from the page stays true on that page without a reload, in a real browser against the real stack.

An operator starts a full sweep of every active node from "Start a sweep" while the server worker
is held, so the page opens on the sweep still pending ("0 nodes"); the worker then plans it. On
the same page, never reloaded: the node count appears; every progress line it shows counts
forward and never past its total (the confirmation pass's probes apart: "6/6 pairs done · 1/1
probed again", never 6/7 then 6/6); the group collectives' table appears as the group round
closes; the Cancel button goes when the sweep ends. While a sweep runs, the overview says when the
last complete sweep ended and how long ago, in the pages' one format. Results are played through the real ingest
path from a thread of their own (tests/support/live.py), as the agents would send them.
"""

import re
import time
from datetime import timedelta

import pytest
from django.utils import timezone

from cluster_health import ingest
from cluster_health.models import GroupProbe, PairProbe, Sweep
from cluster_health.sweeps import rounds
from cluster_health.web import times
from devtools.sweep_driver import result_for
from tests.support import timing
from tests.support.artifacts import shot
from tests.support.browser import logged_in_page
from tests.support.dashboard_rows import PASSWORD, make_nodes, make_sweep, make_user
from tests.support.live import Heartbeats, ServerSide, running_sweep_page

pytestmark = [pytest.mark.e2e, pytest.mark.browser, pytest.mark.django_db(transaction=True), pytest.mark.timeout(240)]
NAMES = ["ls0", "ls1", "ls2", "ls3"]
FAILING = {"ls0", "ls1"}  # fails in its planned round, is fine when probed again: one probe in the pass

# Every text the progress line takes, recorded in the page as it changes.
RECORD_PROGRESS = """() => {
  window.__progress = [];
  const el = document.querySelector('[data-progress]');
  new MutationObserver(() => window.__progress.push(el.textContent)).observe(el, { childList: true, characterData: true, subtree: true });
}"""
COUNTS = re.compile(r"(?:round (\d+)/(\d+) · )?(\d+)/(\d+) pairs done( in this round)?(?: · (\d+)/(\d+) probed again)?")


def commands_now(sweep_id: int) -> list[dict]:
    """The commands the agents would be running now: each rank of each running pair and group probe."""
    sweep = Sweep.objects.get(pk=sweep_id)
    kind, settings = rounds.pair_settings(sweep)
    out = []
    for probe in PairProbe.objects.filter(sweep=sweep, status="running").select_related("node_a", "node_b"):
        out += rounds.pair_commands(sweep, probe, kind, settings)
    for group in GroupProbe.objects.filter(sweep=sweep, status="running"):
        out += rounds.group_commands(sweep, group)[0]
    return out


def answer(cmd: dict) -> dict:
    if cmd["kind"] == "pair" and Sweep.objects.get(pk=cmd["sweep_id"]).phase != "confirming":
        probe = PairProbe.objects.select_related("node_a", "node_b").get(pk=cmd["probe_id"])
        if {probe.node_a.name, probe.node_b.name} == FAILING:
            return result_for(cmd, status="failed", stage="connect", reason="refused", hint="connection refused")
    return result_for(cmd)


def play_to_the_end(on_server, sweep_id: int, in_pass) -> None:
    """Answer every round as it starts until the sweep closes (bounded); ``in_pass()`` once, as the pass begins."""
    deadline = time.monotonic() + timing.SWEEP_END_S
    while (sweep := Sweep.objects.get(pk=sweep_id)).is_open:
        assert time.monotonic() < deadline, "the sweep did not close"
        if sweep.phase == "confirming" and in_pass is not None:
            in_pass()
            in_pass = None
        commands = commands_now(sweep_id)
        if commands:
            on_server(ingest.ingest_results, [answer(c) for c in commands])
        time.sleep(0.3)  # the page sees each round's frames; the next round starts as this one closes


def progress_problems(texts: list[str], pairs_total: int) -> list[str]:
    """Every progress line that went back, past its total, or counted a total other than the sweep's pairs."""
    problems, sweep_done, round_done = [], 0, {}
    for text in texts:
        m = COUNTS.search(text)
        if not m:
            continue
        rnd, done, total, per_round = m.group(1), int(m.group(3)), int(m.group(4)), m.group(5)
        if done > total:
            problems.append(f"past its total: {text}")
        if m.group(6) and int(m.group(6)) > int(m.group(7)):
            problems.append(f"probed again past its total: {text}")
        if per_round:
            if done < round_done.get(rnd, 0):
                problems.append(f"went back in round {rnd}: {text}")
            round_done[rnd] = done
        elif total:
            if total != pairs_total:
                problems.append(f"{total} pairs, not {pairs_total}: {text}")
            if done < sweep_done:
                problems.append(f"went back: {text}")
            sweep_done = done
    return problems


def test_a_sweep_started_from_the_page_shows_itself_truly_without_a_reload(stack, chromium):
    on_server = ServerSide()
    on_server(make_user, "operator", operator=True)  # saving a user tells the channel layer: not from Playwright's loop
    errors: list[str] = []
    with Heartbeats(NAMES):
        base = stack.start_web()
        context, page = logged_in_page(chromium, base, "operator", PASSWORD, height=1100)
        page.on("pageerror", lambda e: errors.append(str(e)))
        stack.sup.stop("worker")  # held: the sweep stays pending, its nodes not planned, until it starts again
        try:
            page.goto(f"{base}/sweeps/new/")
            page.select_option("#id_kind", "full")
            page.click("#start-sweep button[type=submit]")  # no node ticked: every active node
            page.wait_for_url(re.compile(r".*/sweeps/\d+/$"))
            sweep_id = int(page.url.rstrip("/").rsplit("/", 1)[1])
            page.wait_for_function(f"() => document.body.dataset.loaded === '{sweep_id}' && CH.wsState === 'open'")
            assert page.text_content("[data-sweep-nodes]") == "0 nodes"  # pending: not planned yet
            assert page.locator("[data-open-only] button").is_visible()
            assert page.locator("[data-group-collectives]").is_hidden()
            page.evaluate(RECORD_PROGRESS)
            page.evaluate("window.__noReload = true")
            shot(page, "live-started-pending")

            stack.start_server_worker()
            page.wait_for_function(
                f"() => document.querySelector('[data-sweep-nodes]').textContent === '{len(NAMES)} nodes'",
                timeout=timing.PAGE_RECONNECT_MS,  # the worker's start included
            )

            def in_pass():
                # The page's own re-read of the sweep (as on a reconnect) while the pass runs: the whole sweep's count.
                page.evaluate("CH.live.reload()")
                page.wait_for_function(
                    "() => document.querySelector('[data-progress]').textContent.includes('probed again')",
                    timeout=timing.PAGE_CELL_MS,
                )
                shot(page, "live-started-confirming")

            play_to_the_end(on_server, sweep_id, in_pass)
            done = Sweep.objects.get(pk=sweep_id)
            assert done.status == "finished" and GroupProbe.objects.filter(sweep=done, status="ok").count() == 1
            assert PairProbe.objects.get(sweep=done, node_a__name="ls0", node_b__name="ls1").status == "transient"

            page.wait_for_function(
                "() => document.querySelector('[data-sweep-status]').dataset.value === 'finished'",
                timeout=timing.PAGE_CELL_MS,
            )
            page.wait_for_function(
                "() => CH.matrix.statusOf('ls0', 'ls1') === 'transient'", timeout=timing.PAGE_CELL_MS
            )
            assert page.locator("[data-open-only] button").is_hidden()  # no Cancel on a finished sweep
            table = page.locator("[data-group-collectives]")
            assert table.is_visible() and "group" in table.locator("tbody").text_content()
            texts = page.evaluate("window.__progress")
            # The pass's probes counted apart from the sweep's six pairs, which stay 6/6 (never 6/9, then 6/6).
            assert any(re.match(r"confirming · round 5/6 · 6/6 pairs done · 0/3 probed again", t) for t in texts), texts
            assert progress_problems(texts, pairs_total=6) == [], texts
            assert progress_problems([page.text_content("[data-progress]")], pairs_total=6) == []
            assert "6/6 pairs done" in page.text_content("[data-progress]")
            assert page.evaluate("window.__noReload") is True  # the same page throughout
            assert errors == []
            shot(page, "live-started-finished")
        finally:
            if not stack.sup.alive("worker"):
                stack.start_server_worker()
            context.close()
            on_server.close()


def test_the_overview_says_when_the_last_complete_sweep_ended_while_one_runs(stack, chromium):
    names = ["lc0", "lc1"]
    done = make_sweep(make_nodes(names), verdict="pass", kind="full")
    Sweep.objects.filter(pk=done.pk).update(finished=timezone.now() - timedelta(minutes=3))
    done.refresh_from_db()
    with running_sweep_page(stack, chromium, names, height=900) as live:
        page = live.page
        page.goto(page.url.split("/sweeps/", 1)[0] + "/")
        page.wait_for_function(f"() => document.getElementById('last-complete').dataset.loaded === '{done.pk}'")
        # The same words and clock as a closed sweep's header: its time in TIME_ZONE, named, and its age.
        assert page.text_content("[data-last-when]") == f"ended {times.absolute(done.finished)}, 3 min ago"
        assert page.text_content("[data-verdict]") == "running"
