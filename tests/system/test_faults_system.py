"""The system's own faults, mid-sweep: Redis restarted, an agent SIGKILLed, the server worker restarted.

Agents run in a namespace test bed and reach Redis through its unix socket; the
server worker, beat and the sweep command reach it on loopback. Every sweep must
end (finished, or failed with a reason): none is ever left running.
"""

import json
import tempfile
import time
from pathlib import Path

import pytest
import redis

from cluster_health.queues import keys
from tests.support import timing
from tests.support.fault_bed import FAST, agent_bed, cell, fast_sweep, record, record_cell, restart_agent
from tests.support.sweep_setup import TimedSweep, sweep_flags, wait_online

pytestmark = [pytest.mark.netns, pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

NAMES = ["s1", "s2", "s3", "s4"]


@pytest.fixture(scope="module")
def bed(make_module_testbed, stack):
    return agent_bed(make_module_testbed(4, names=NAMES), stack)


def wait_for(predicate, timeout, what):
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} not within {timeout}s")
        time.sleep(timing.POLL_S)


def closed_pairs(sweep_id):
    from cluster_health.models import PairProbe

    return PairProbe.objects.filter(sweep_id=sweep_id).exclude(status__in=("pending", "running")).count()


def past_its_first_pair(sweep):
    """The sweep, returned once its first pair has closed."""
    sid = sweep.sweep_id()
    wait_for(lambda: closed_pairs(sid) >= 1, 60, "a first closed pair")
    return sweep


def probe_in_stage(sweep_id, node, stage, since):
    """True once `node`'s probe for the sweep has logged entering `stage` (stage logs are files in the shared /tmp).

    Probe directories of agents killed earlier stay behind, so only those written after `since` count.
    """
    for spec in Path(tempfile.gettempdir()).glob("cluster-health-probe-*/spec.json"):
        try:
            if spec.stat().st_mtime < since:
                continue
            command = json.loads(spec.read_text())["command"]
            if (command["node"], command["sweep_id"]) != (node, sweep_id):
                continue
            if f'"stage": "{stage}"' in (spec.parent / "stages.jsonl").read_text():
                return True
        except (OSError, ValueError, KeyError):
            continue  # a probe finishing just now
    return False


@pytest.mark.timeout(200)
def test_an_agent_killed_mid_probe_is_a_timeout_and_back_for_the_next_sweep(bed, stack):
    wait_online(NAMES)
    pair = ["--kind", "pairs", "--pairs", "s1:s2", "--wait", "--timeout", "120", "--baseline", "none"]
    pair += sweep_flags("4194304", 200, bandwidth=20)
    since = time.time()
    sweep = TimedSweep(stack, *pair)
    sid = sweep.sweep_id()
    wait_for(lambda: probe_in_stage(sid, "s2", "bandwidth", since), 60, "s2's probe in its bandwidth stage")
    injected = time.monotonic()
    bed.stop_agent("s2", sig=9)
    sweep.injected_at = injected
    took = sweep.time_to_cells(("s1", "s2"))[("s1", "s2")]
    rc, report = sweep.report()
    p = cell(report, "s1", "s2")
    assert rc == 2 and p["status"] == "timeout", p
    assert p["reason"] in ("collective_timeout", "probe_crashed", "transport", "collective_error"), p
    restart_agent(bed, stack, "s2")
    wait_online(["s1", "s2"])
    rc, after = TimedSweep(
        stack, "--kind", "pairs", "--pairs", "s1:s2", "--wait", "--timeout", "120", *FAST, "--baseline", "none"
    ).report()
    assert (rc, cell(after, "s1", "s2")["status"]) == (0, "ok"), after
    shown = f"{p['status']} at {p['stage']} ({p['reason']}); agent restarted, next sweep ok"
    record_cell("agent SIGKILLed mid-probe", took, p, shown)


@pytest.mark.timeout(200)
def test_results_sent_while_the_server_worker_is_down_are_ingested_after(bed, stack):
    from cluster_health.models import RejectedMessage

    wait_online(NAMES)
    rejected = RejectedMessage.objects.count()
    sweep = past_its_first_pair(fast_sweep(stack, NAMES))
    injected = time.monotonic()
    # Stopped as an operator stops it (systemd's KillMode=mixed): the main process lets its pool finish the
    # task in hand. (A worker killed outright between committing a round and publishing its commands is
    # the reaper's outbox's case: tests/sweeps/test_outbox.py.)
    stack.sup.stop("worker", group=False, timeout=60)
    queued = redis.Redis.from_url(stack.redis.url)
    try:
        # The agents finish their round and report into the durable ingest queue, which waits (the
        # worker's ingest consumer stopped with it).
        wait_for(lambda: keys.waiting_on_ingest(queued) >= 2, 40, "results queued while the worker is down")
        waiting = keys.waiting_on_ingest(queued)
    finally:
        stack.start_server_worker()
    rc, report = sweep.report(timeout=timing.SWEEP_END_S)
    ended = time.monotonic() - injected
    assert (rc, report["status"], report["verdict"]) == (0, "finished", "pass"), report
    assert {p["status"] for p in report["pairs"]} == {"ok"} and len(report["pairs"]) == 6
    assert RejectedMessage.objects.count() == rejected
    record(
        "server worker restarted mid-sweep",
        ended,
        f"{waiting} messages queued while down, all ingested after; sweep pass, 6/6 ok",
        {"status": "ok"},
    )


@pytest.mark.timeout(200)
def test_a_sweep_survives_redis_restarting_mid_sweep(bed, stack):
    wait_online(NAMES)
    sweep = past_its_first_pair(fast_sweep(stack, NAMES))
    injected = time.monotonic()
    stack.redis.restart()  # everything queued is lost: commands, results, heartbeats
    rc, report = sweep.report(timeout=timing.SWEEP_END_S)
    ended = time.monotonic() - injected
    assert report["status"] in ("finished", "failed"), report
    if report["status"] == "failed":
        assert report.get("error") or report["findings"], report
    assert all(p["status"] not in ("pending", "running") for p in report["pairs"]), report["pairs"]
    # Agents and the server reconnected by themselves: the next sweep passes. Commands go
    # through the default exchange straight to the node's queue, so the bindings Redis lost
    # with its restart are not needed for them to arrive.
    wait_online(NAMES, timeout=timing.AGENTS_ONLINE_S)
    rc, after = fast_sweep(stack, NAMES).report()
    assert (rc, after["verdict"]) == (0, "pass"), [p for p in after["pairs"] if p["status"] != "ok"]
    lost = [p for p in report["pairs"] if p["status"] != "ok"]
    record(
        "Redis restarted mid-sweep",
        ended,
        f"sweep {report['status']} ({report['verdict']}), {len(lost)} of {len(report['pairs'])} pairs "
        f"{'/'.join(sorted({p['status'] for p in lost})) or 'lost'}; next sweep pass",
        lost[0] if lost else {"status": "ok"},
    )
