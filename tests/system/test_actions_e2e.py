"""Done when: an agent dies between two sweeps on a real stack with a real slurmctld.

The webhook receiver gets an alert naming the node; sinfo shows it NOT drained (not
hearing a node is a warning: the agent, the broker or the server may be at fault, and
only confirmed evidence drains, docs/OPERATIONS.md "Slurm"); once the agent is back
and a sweep passes, a resolving alert arrives. The messages are kept in test-artifacts/.
Confirmed failures drained through slurmctld: tests/actions/test_confirmed_drains.py,
and on the namespace bed tests/system/test_faults_network.py.
"""

import json
import os
import signal
import time

import pytest

from cluster_health import vocabulary
from cluster_health.actions.models import ActionOutbox, AlertChannel, AlertDelivery, SlurmDrain
from devtools import services
from tests.support.action_fixtures import SlurmCluster, WebhookReceiver
from tests.support.artifacts import ARTIFACTS
from tests.support.sweep_setup import FAST, TimedSweep, manage, wait_offline, wait_online

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True), pytest.mark.timeout(420)]

NODES = ["gpu-a", "gpu-b", "gpu-c"]
# How long the server worker stays frozen: past the stack's 6-s online window and the FAST probes' deadlines.
PAUSE_S = 20


def sweep(stack, *, expect_code):
    wait = ["--wait", "--json", "--timeout", "150"]
    run = manage(stack, "sweep", "--kind", "connectivity", "--nodes", ",".join(NODES), *wait, *FAST, timeout=200)
    assert run.returncode == expect_code, run.stdout + run.stderr
    return json.loads(run.stdout)


@pytest.fixture
def acting_stack(stack, tmp_path):
    """The stack's server worker, restarted with Slurm drains on against a private slurmctld."""
    cluster = SlurmCluster(tmp_path / "slurm", ["node-a", "node-b", "node-c"]).start()
    env = {
        **stack.env,
        "SLURM_CONF": str(cluster.conf),
        "CLUSTER_HEALTH_SLURM_ACTIONS": "drain",
        "CLUSTER_HEALTH_SLURM_NODE_MAP": "s/^gpu-/node-/",
        "CLUSTER_HEALTH_BASE_URL": "https://health.example.org",
        "CLUSTER_HEALTH_ALERT_RETRY_BACKOFF_S": "1",
    }
    stack.sup.stop("worker")
    stack.sup.start("worker", services.server_worker_args("server@test"), env=env, restart=True)
    try:
        yield stack, cluster
    finally:
        for name in NODES:
            stack.stop_agent(name)
        stack.restart_server_worker()  # back to the shared environment: Slurm actions off
        cluster.stop()


def test_it_alerts_on_a_node_whose_agent_died_and_never_drains_it(acting_stack):
    stack, slurm = acting_stack
    transcript = []

    def note(title, lines):
        transcript.append(f"## {title}")
        transcript.extend(lines if isinstance(lines, list) else [lines])
        transcript.append("")

    with WebhookReceiver() as hook:
        AlertChannel.objects.create(name="test receiver", kind="webhook", target=hook.url)
        for name in NODES:
            stack.start_agent(name)
        wait_online(NODES)

        first = sweep(stack, expect_code=0)
        assert first["verdict"] == "pass"
        note(f"sweep #{first['sweep']}: {first['verdict']}; sinfo", slurm.sinfo_lines())

        stack.stop_agent("gpu-c", sig=9)
        wait_offline("gpu-c", timeout=60)
        second = sweep(stack, expect_code=2)
        assert [(f["code"], f["subject"]) for f in second["findings"] if f["severity"] == "fail"] == [
            ("node_offline", "gpu-c")
        ]
        opened = hook.wait_for(lambda b: b["event"] == "open" and b["subject"] == "gpu-c", 60)
        assert opened["sweep"] == second["sweep"] and opened["reason"] == "node_offline"
        # Not hearing a node is never confirmed evidence: the alert is a warning that says so, not a page at fail.
        assert opened["severity"] == "warn" and "not confirmed by a second look" in opened["text"], opened
        assert opened["url"] == "https://health.example.org/nodes/gpu-c/"
        # The worker's Slurm task for the sweep has run (its outbox row is done): sinfo shows no drain.
        services.wait_until(
            lambda: ActionOutbox.objects.filter(
                sweep_id=second["sweep"], task=vocabulary.TASK_SLURM, done__isnull=False
            ).exists(),
            60,
            0.3,
            "the Slurm task of the sweep done",
        )
        states = slurm.sinfo_states()
        assert not any(states[n][0].startswith("drain") for n in ("node-a", "node-b", "node-c")), states
        assert not SlurmDrain.objects.exists()
        note(f"sweep #{second['sweep']}: {second['verdict']} (gpu-c's agent killed); sinfo", slurm.sinfo_lines())
        note("scontrol show node node-c", slurm.show_node("node-c"))

        stack.start_agent("gpu-c")
        wait_online(["gpu-c"])
        third = sweep(stack, expect_code=0)
        assert third["verdict"] == "pass"
        resolved = hook.wait_for(lambda b: b["event"] == "resolve" and b["subject"] == "gpu-c", 60)
        assert resolved["sweep"] == third["sweep"] and resolved["alert"] == opened["alert"]
        note(f"sweep #{third['sweep']}: {third['verdict']} (gpu-c's agent back); sinfo", slurm.sinfo_lines())
        time.sleep(1)  # the verdict alert's resolving message may still be on its way
        note("webhook bodies, in arrival order", [json.dumps(b, sort_keys=True) for b in hook.bodies])

    assert not SlurmDrain.objects.exists()
    assert [b["event"] for b in hook.bodies if b["subject"] == "gpu-c"] == ["open", "resolve"]
    log = list(AlertDelivery.objects.order_by("pk").values_list("alert__key", "event", "status", "attempts"))
    note("delivery log (alert, event, status, attempts)", [str(row) for row in log])
    assert {row[2] for row in log} == {"sent"}
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    (ARTIFACTS / "actions-e2e.md").write_text("\n".join(transcript))


def test_a_server_worker_paused_mid_sweep_drains_no_node(acting_stack):
    """The server worker frozen (SIGSTOP) in the middle of a sweep, past the online window and every probe's
    deadline, then let go: the agents were fine all along, so whatever the backlog makes of the sweep (late
    results, probes closed by the reaper, nodes seen silent), no node is drained."""
    from cluster_health.models import PairProbe, Sweep

    stack, slurm = acting_stack
    for name in NODES:
        stack.start_agent(name)
    wait_online(NODES)
    run = TimedSweep(stack, "--kind", "connectivity", "--nodes", ",".join(NODES), "--wait", "--timeout", "200", *FAST)
    sid = run.sweep_id()
    services.wait_until(lambda: PairProbe.objects.filter(sweep_id=sid).exists(), 60, 0.05, "the sweep's probes")
    worker = stack.sup.procs["worker"].pid
    os.killpg(worker, signal.SIGSTOP)
    try:
        assert Sweep.objects.get(pk=sid).is_open, "the sweep ended before the worker was frozen"
        time.sleep(PAUSE_S)
    finally:
        os.killpg(worker, signal.SIGCONT)
    rc, report = run.report(timeout=260)
    services.wait_until(
        lambda: ActionOutbox.objects.filter(sweep_id=sid, task=vocabulary.TASK_SLURM, done__isnull=False).exists(),
        90,
        0.3,
        "the Slurm task of the sweep done",
    )
    assert Sweep.objects.get(pk=sid).status == "finished", report
    assert not SlurmDrain.objects.exists(), list(SlurmDrain.objects.values())
    states = slurm.sinfo_states()
    assert not any(states[n][0].startswith("drain") for n in ("node-a", "node-b", "node-c")), (states, report)
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    (ARTIFACTS / "paused-server-sweep.json").write_text(json.dumps(report, indent=1))
