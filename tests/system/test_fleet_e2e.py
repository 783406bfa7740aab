"""Absent is not healthy, end to end: real agents, one stopped well before the nightly-style sweep.

A sweep without --nodes covers the fleet (every active node): the stopped node fails it
(exit 2, a finding naming it) until someone retires it, and then the same sweep passes.
The scheduled sweep task and the launch rehearsal say the same. The stack judges a
node offline after CLUSTER_HEALTH_ONLINE_AFTER_S of silence (6 s in the test stack).
"""

import json
import time
from datetime import timedelta

import pytest
from django.utils import timezone

from cluster_health import vocabulary
from cluster_health.models import Finding, Node, Sweep
from cluster_health.queues import dispatch
from tests.support.artifacts import ARTIFACTS
from tests.support.sweep_setup import FAST, manage, running_agents

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True), pytest.mark.timeout(90)]

UP, DOWN = ["f0", "f1"], "f2"


def fleet_with_a_stopped_node(stack):
    """f0 and f1 running, f2 registered but silent for longer than the stack's online window; nothing else active."""
    running_agents(stack, UP + [DOWN] if not Node.objects.filter(name=DOWN).exists() else UP)
    stack.stop_agent(DOWN)
    # Nodes left registered by earlier tests are not this test's fleet.
    Node.objects.exclude(name__in=UP + [DOWN]).update(active=False)
    window = float(stack.env["CLUSTER_HEALTH_ONLINE_AFTER_S"]) + 1
    deadline = time.monotonic() + window + 10
    while time.monotonic() < deadline:
        beat = Node.objects.get(name=DOWN).last_heartbeat
        if beat < timezone.now() - timedelta(seconds=window):
            return
        time.sleep(0.3)
    raise AssertionError(f"{DOWN} still looks online after {window + 10:.0f}s")


def keep_scenario(step: str, code: int, report) -> None:
    """Keep the scenario's exit code and sweep JSON in the test artifacts, one file per database."""
    from django.db import connection

    path = ARTIFACTS / f"absent-node-{connection.vendor}.json"
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    kept = json.loads(path.read_text()) if path.exists() and step != "stopped" else {}
    kept[step] = {"exit": code, "sweep": report}
    path.write_text(json.dumps(kept, indent=1))


def sweep_json(stack, *args):
    run = manage(stack, "sweep", "--kind", "full", "--wait", "--json", "--timeout", "60", *args, *FAST, timeout=90)
    return run.returncode, json.loads(run.stdout) if run.stdout.strip() else run.stderr


def test_it_fails_a_default_sweep_with_a_stopped_node_until_it_is_retired(stack):
    fleet_with_a_stopped_node(stack)
    code, report = sweep_json(stack)
    keep_scenario("stopped", code, report)
    assert code == 2, report
    assert report["verdict"] == "fail" and report["nodes"] == ["f0", "f1", "f2"]
    assert [a["node"] for a in report["offline_at_start"]] == [DOWN]
    assert [(f["code"], f["subject"]) for f in report["findings"] if f["severity"] == "fail"] == [
        ("node_offline", DOWN)
    ]
    down = [p for p in report["pairs"] if DOWN in (p["a"], p["b"])]
    assert {(p["status"], p["reason"]) for p in down} == {("offline", "agent_offline")}
    assert all(p["hint"].startswith(f"{DOWN} offline: last heartbeat ") for p in down)
    assert [p["status"] for p in report["pairs"] if DOWN not in (p["a"], p["b"])] == ["ok"]

    retired = manage(stack, "nodes", "retire", DOWN)
    assert retired.returncode == 0 and f"{DOWN}: retired" in retired.stdout
    code, report = sweep_json(stack)
    keep_scenario("retired", code, report)
    assert code == 0, report
    assert report["verdict"] == "pass" and report["nodes"] == UP and report["offline_at_start"] == []

    refused = manage(stack, "sweep", "--nodes", f"f0,{DOWN}")
    assert refused.returncode != 0 and f"{DOWN} retired" in refused.stderr


def scheduled(kind="full"):
    """Ask the server worker for the scheduled sweep as beat does, and wait (bounded) for it to end."""
    before = set(Sweep.objects.values_list("pk", flat=True))
    dispatch.send_to_server(
        vocabulary.TASK_SCHEDULED_SWEEP,
        kind=kind,
        sizes=[4096, 65536],
        iterations=3,
        timeouts={"connect": 3.0, "init": 10.0, "bandwidth": 3.0},
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        sweep = Sweep.objects.exclude(pk__in=before).filter(source="schedule").first()
        if sweep is not None and not sweep.is_open:
            return sweep
        time.sleep(0.3)
    raise AssertionError("the scheduled sweep did not end within 60 s")


def test_it_fails_the_scheduled_sweep_the_same_way(stack):
    fleet_with_a_stopped_node(stack)
    sweep = scheduled()
    assert (sweep.status, sweep.verdict) == ("finished", "fail") and DOWN in sweep.nodes
    assert list(Finding.objects.filter(sweep=sweep, severity="fail").values_list("code", "subject")) == [
        ("node_offline", DOWN)
    ]
    Node.objects.get(name=DOWN).retire()
    sweep = scheduled()
    assert (sweep.verdict, sweep.nodes) == ("pass", UP)


def test_it_lists_the_stopped_node_in_the_launch_rehearsal_and_the_report(stack, client):
    from tests.support.dashboard_rows import make_user

    fleet_with_a_stopped_node(stack)
    run = manage(stack, "preflight", "--master", "f0", "--port", "29511", "--json", "--timeout", "60", timeout=90)
    assert run.returncode == 2, run.stdout + run.stderr
    report = json.loads(run.stdout)
    assert ("node_offline", DOWN) in [(f["code"], f["subject"]) for f in report["findings"]]
    client.force_login(make_user("viewer", operator=False))
    html = client.get(f"/sweeps/{report['sweep']}/report/").content.decode()
    assert f"{DOWN} is offline, last heartbeat" in html
