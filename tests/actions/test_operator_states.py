"""Operator states: a node in maintenance is out of fleet sweeps, alerts and drains; its return to service
resumes it in a real slurmctld only after a verification sweep passes it; an acknowledged finding's alert
is not sent again until the finding changes. Every action is in the audit log.

Sweeps run through the real lifecycle, findings and confirmation pass, the agents' side played
in-process (devtools/sweep_driver.py); the management commands are the real ones.
"""

from __future__ import annotations

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from cluster_health import sweeps
from cluster_health.actions import alerts, slurm, tasks
from cluster_health.actions.models import Alert, SlurmDrain
from cluster_health.models import AuditEntry, Node, PairProbe, Sweep
from devtools.sweep_driver import heartbeat, result_for
from tests.support.action_fixtures import SlurmCluster
from tests.support.action_rows import finished_sweep

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("memory_channel_layer")]
NODES = ["n1", "n2", "n3", "n4"]
N3_DEAD = ("fail", "node_unreachable", "n3", "every pair with n3 failed (3 of 3: connect_timeout)")
SEEN_AGAIN = {("n1", "n3"): "confirmed", ("n2", "n3"): "confirmed", ("n3", "n4"): "confirmed"}
BAD_N3 = {("n1", "n3"): "timeout", ("n2", "n3"): "timeout", ("n3", "n4"): "timeout"}


@pytest.fixture
def slurmctld(tmp_path, monkeypatch, settings):
    cluster = SlurmCluster(tmp_path / "slurm", NODES).start()
    monkeypatch.setenv("SLURM_CONF", str(cluster.conf))
    settings.SLURM_NODE_MAP = ""
    settings.SLURM_ACTIONS = "drain"
    try:
        yield cluster
    finally:
        cluster.stop()


def online(*names):
    for n in names or NODES:
        heartbeat(n)


def pairs_with(cmd) -> set[str]:
    probe = PairProbe.objects.select_related("node_a", "node_b").get(pk=cmd["probe_id"])
    return {probe.node_a.name, probe.node_b.name}


def test_it_leaves_a_node_in_maintenance_out_of_fleet_sweeps_without_failing_them(driver):
    online()
    call_command("nodes", "maintenance", "n3", reason="swapping its NIC, ticket 88")
    node = Node.objects.get(name="n3")
    assert (node.state, node.state_reason) == ("maintenance", "swapping its NIC, ticket 88")
    Node.objects.filter(name="n3").update(last_heartbeat=None)  # powered off for the repair
    sweep = driver.sweep(kind="quick")
    driver.answer_all()
    sweep.refresh_from_db()
    assert sweep.nodes == ["n1", "n2", "n4"] and sweep.verdict == "pass"
    [entry] = AuditEntry.objects.all()
    assert (entry.action, entry.subject, entry.source, entry.text) == (
        "maintenance",
        "n3",
        "command",
        "swapping its NIC, ticket 88",
    )
    assert entry.actor


def test_it_refuses_a_reason_with_control_characters_or_none(driver):
    online()
    with pytest.raises(CommandError, match="control characters"):
        call_command("nodes", "maintenance", "n3", reason="bad\x00reason")
    with pytest.raises(CommandError, match="usage"):
        call_command("nodes", "maintenance", "n3")
    assert Node.objects.get(name="n3").state == "service" and not AuditEntry.objects.exists()


def test_a_node_in_maintenance_is_neither_alerted_on_nor_drained(slurmctld):
    Node.objects.create(name="n3", address="127.0.0.1", state="maintenance", state_reason="repair")
    bad = finished_sweep(NODES, BAD_N3, [N3_DEAD], outcomes=SEEN_AGAIN)
    assert alerts.evaluate_sweep(bad) == [] and not Alert.objects.exists()
    assert slurm.act_on_sweep(bad, "drain") == ["left n3: maintenance (an operator's)"]
    assert not slurmctld.sinfo_states()["n3"][0].startswith("drain")


def test_a_return_to_service_resumes_the_node_only_after_its_verification_sweep_passes(driver, slurmctld):
    online()
    drained = finished_sweep(NODES, BAD_N3, [N3_DEAD], outcomes=SEEN_AGAIN)
    assert slurm.act_on_sweep(drained, "drain") == ["drained n3"]
    call_command("nodes", "maintenance", "n3", reason="reseating the cable")

    # The first try: the cable is still bad. The node stays in maintenance, still drained.
    call_command("nodes", "maintenance", "n3", off=True)
    node = Node.objects.get(name="n3")
    assert node.state == "returning"
    first = Sweep.objects.get(pk=node.return_sweep_id)
    assert first.kind == "pairs" and {tuple(p) for p in first.params["pairs"]} == {("n3", "n1"), ("n3", "n2")}
    driver.run(sweeps.start_sweep, first.pk)

    def still_bad(cmd):
        if "n3" in pairs_with(cmd):
            return result_for(cmd, status="timeout", stage="connect", reason="connect_timeout", hint="no answer")
        return result_for(cmd)

    driver.answer_all(still_bad)
    first.refresh_from_db()
    assert first.status == "finished"
    tasks.after_sweep(first.pk)
    tasks.slurm_actions(first.pk)
    node.refresh_from_db()
    assert node.state == "maintenance" and node.state_reason.startswith(f"verification sweep #{first.pk} did not pass")
    assert slurmctld.sinfo_states()["n3"][0].startswith("drain")
    assert not Alert.objects.filter(key="node:n3").exists()  # still held: no alert

    # Repaired: the verification passes, the node is back in service and resumed in Slurm.
    call_command("nodes", "maintenance", "n3", off=True)
    second = Sweep.objects.get(pk=Node.objects.get(name="n3").return_sweep_id)
    driver.run(sweeps.start_sweep, second.pk)
    driver.answer_all()
    tasks.after_sweep(second.pk)
    node.refresh_from_db()
    assert node.state == "service"
    state, reason = slurmctld.sinfo_states()["n3"]
    assert not state.startswith("drain") and reason == "none"
    assert SlurmDrain.objects.get().status == "resumed"
    actions = list(AuditEntry.objects.order_by("pk").values_list("action", "subject", "sweep_id"))
    assert actions == [
        ("maintenance", "n3", None),
        ("return_requested", "n3", first.pk),
        ("return_failed", "n3", first.pk),
        ("return_requested", "n3", second.pk),
        ("returned", "n3", second.pk),
    ]


def test_a_return_needs_healthy_partners(driver):
    online("n3")
    Node.objects.filter(name="n3").update(state="maintenance", state_reason="repair")
    with pytest.raises(CommandError, match="no healthy partner"):
        call_command("nodes", "maintenance", "n3", off=True)
    assert Node.objects.get(name="n3").state == "maintenance"


def test_an_acknowledged_finding_is_not_alerted_again_until_it_changes(settings):
    from cluster_health import operator_states

    first = finished_sweep(NODES, BAD_N3, [N3_DEAD], outcomes=SEEN_AGAIN)
    alerts.evaluate_sweep(first)
    assert Alert.objects.get(key="node:n3").status == "open"
    operator_states.acknowledge(first.findings.get(), "known: RMA 4411", actor="olivia", source="api")
    # The problem clears, then comes back the same: no alert while acknowledged.
    alerts.evaluate_sweep(finished_sweep(NODES))
    assert Alert.objects.get(key="node:n3").status == "resolved"
    same = finished_sweep(NODES, BAD_N3, [N3_DEAD], outcomes=SEEN_AGAIN)
    tasks.after_sweep_operations(same)
    assert alerts.evaluate_sweep(same) == [] and not Alert.objects.filter(key="node:n3", status="open").exists()
    # It changes (another text): the acknowledgement ends, and the alert is sent.
    changed = ("fail", "node_unreachable", "n3", "every pair with n3 failed (3 of 3: refused)")
    worse = finished_sweep(NODES, BAD_N3, [changed], outcomes=SEEN_AGAIN)
    tasks.after_sweep_operations(worse)
    alerts.evaluate_sweep(worse)
    assert Alert.objects.get(key="node:n3", status="open").opened_by_id == worse.pk
    assert list(AuditEntry.objects.order_by("pk").values_list("action", "actor")) == [
        ("acknowledge", "olivia"),
        ("unacknowledge", ""),
    ]
