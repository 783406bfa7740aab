"""Done when: an agent dies between two sweeps on a real stack with a real slurmctld.

The webhook receiver gets an alert naming the node, sinfo shows it drained with the
sweep in the reason; once the agent is back and a sweep passes, a resolving alert
arrives and the node is resumed. The messages are kept in test-artifacts/.
"""

import json
import time

import pytest

from cluster_health.actions.models import AlertChannel, AlertDelivery, SlurmDrain
from devtools import services
from tests.support.action_fixtures import SlurmCluster, WebhookReceiver
from tests.support.artifacts import ARTIFACTS
from tests.support.sweep_setup import FAST, manage, wait_offline, wait_online

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True), pytest.mark.timeout(420)]

NODES = ["gpu-a", "gpu-b", "gpu-c"]


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


def test_it_alerts_drains_and_resumes_a_node_whose_agent_died(acting_stack):
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
        assert opened["url"] == "https://health.example.org/nodes/gpu-c/"
        drained = services.wait_until(
            lambda: slurm.sinfo_states()["node-c"][0].startswith("drain") and slurm.sinfo_states(),
            60,
            0.3,
            "node-c drained",
        )
        # "is offline" when it was silent as the sweep was planned, "went offline" when that happened
        # during the sweep: which one depends on when the sweep starts within the online window.
        reason = drained["node-c"][1]
        assert reason.startswith(f"cluster-health sweep #{second['sweep']}: gpu-c "), reason
        assert "offline" in reason and "heartbeat" in reason, reason
        assert not any(drained[n][0].startswith("drain") for n in ("node-a", "node-b"))  # only the blamed one
        note(f"sweep #{second['sweep']}: {second['verdict']} (gpu-c's agent killed); sinfo", slurm.sinfo_lines())
        note("scontrol show node node-c", slurm.show_node("node-c"))

        stack.start_agent("gpu-c")
        wait_online(["gpu-c"])
        third = sweep(stack, expect_code=0)
        assert third["verdict"] == "pass"
        resolved = hook.wait_for(lambda b: b["event"] == "resolve" and b["subject"] == "gpu-c", 60)
        assert resolved["sweep"] == third["sweep"] and resolved["alert"] == opened["alert"]
        states = services.wait_until(
            lambda: not slurm.sinfo_states()["node-c"][0].startswith("drain") and slurm.sinfo_states(),
            60,
            0.3,
            "node-c resumed",
        )
        assert states["node-c"][1] == "none"
        note(f"sweep #{third['sweep']}: {third['verdict']} (gpu-c's agent back); sinfo", slurm.sinfo_lines())
        time.sleep(1)  # the verdict alert's resolving message may still be on its way
        note("webhook bodies, in arrival order", [json.dumps(b, sort_keys=True) for b in hook.bodies])

    assert SlurmDrain.objects.get().status == "resumed"
    assert [b["event"] for b in hook.bodies if b["subject"] == "gpu-c"] == ["open", "resolve"]
    log = list(AlertDelivery.objects.order_by("pk").values_list("alert__key", "event", "status", "attempts"))
    note("delivery log (alert, event, status, attempts)", [str(row) for row in log])
    assert {row[2] for row in log} == {"sent"}
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    (ARTIFACTS / "actions-e2e.md").write_text("\n".join(transcript))
