"""A hang diagnosis's inspects and a sweep's probes never share a node's single command slot
(cluster_health/sweeps/turns.py): an inspect holds the slot for seconds, and a probe that cannot
start within its grace would time out and make a healthy link look failed."""

import time

import pytest
from django.urls import reverse

from cluster_health import hang_diagnoses, sweeps, vocabulary
from cluster_health.ingest import inspections
from cluster_health.models import HangDiagnosis, Sweep
from cluster_health.sweeps import turns
from devtools.sweep_driver import heartbeat, result_for

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("memory_channel_layer")]

MASTER = "127.0.0.1:29500"


def inspected(commands: list[dict]) -> list[str]:
    return sorted(c["node"] for c in commands if c["kind"] == "inspect")


def report(diagnosis: HangDiagnosis, node: str) -> str:
    return inspections.record_report({"v": 1, "kind": "inspect", "probe_id": diagnosis.pk, "node": node, "ranks": []})


def test_a_diagnosis_during_a_sweep_holds_back_its_nodes_inspects_and_names_them_busy_not_silent(driver):
    for n in ("n0", "n1", "n2"):
        heartbeat(n)
    sweep = driver.sweep(kind="connectivity", nodes=["n0", "n1"])
    probes = driver.take()
    assert Sweep.objects.get(pk=sweep.pk).status == "running" and {c["node"] for c in probes} == {"n0", "n1"}
    diagnosis = driver.run(hang_diagnoses.request, master=MASTER, nodes=["n0", "n1", "n2"])
    assert inspected(driver.take()) == ["n2"]  # nothing reaches a node whose probe must start in time
    assert driver.run(hang_diagnoses.send_held, diagnosis) == []  # the sweep still runs
    driver.run(report, diagnosis, "n2")
    answer = hang_diagnoses.conclude(HangDiagnosis.objects.get(pk=diagnosis.pk))
    assert answer["looked"]["busy"] == {"n0": sweep.pk, "n1": sweep.pk}
    assert answer["looked"]["silent"] == []
    assert f"not inspected, busy in sweep #{sweep.pk}: n0, n1" in answer["why"]
    for c in probes:  # the sweep's probes ran undisturbed
        driver.ingest(result_for(c))
    driver.answer_all()
    sweep.refresh_from_db()
    assert (sweep.status, sweep.verdict) == ("finished", "pass")


def test_a_held_inspect_is_sent_once_the_sweep_ends(driver):
    for n in ("n0", "n1"):
        heartbeat(n)
    sweep = driver.sweep(kind="connectivity", nodes=["n0", "n1"])
    probes = driver.take()
    diagnosis = driver.run(hang_diagnoses.request, master=MASTER, nodes=["n0", "n1"])
    assert inspected(driver.take()) == []
    for c in probes:
        driver.ingest(result_for(c))
    driver.answer_all()
    assert Sweep.objects.get(pk=sweep.pk).status == "finished"
    assert driver.run(hang_diagnoses.send_held, diagnosis) == ["n0", "n1"]
    assert inspected(driver.take()) == ["n0", "n1"]
    assert hang_diagnoses.held(HangDiagnosis.objects.get(pk=diagnosis.pk)) == {}


def test_a_sweep_over_a_node_being_inspected_waits_for_its_report_then_runs(driver, viewer_client):
    for n in ("n0", "n1"):
        heartbeat(n)
    diagnosis = driver.run(hang_diagnoses.request, master=MASTER, nodes=["n0"])
    assert inspected(driver.take()) == ["n0"]
    sweep = driver.sweep(kind="connectivity", nodes=["n0", "n1"])
    sweep.refresh_from_db()
    assert (sweep.status, sweep.params["queued_for_hangs"]) == ("pending", [diagnosis.pk])
    assert driver.take() == []  # no probe while the inspect holds n0's slot
    page = viewer_client.get(reverse("sweep", args=[sweep.pk])).content.decode()
    assert f"Queued: it starts when hang diagnosis #{diagnosis.pk} has inspected its nodes" in page
    driver.run(report, diagnosis, "n0")
    assert (vocabulary.TASK_START_SWEEP, {"sweep_id": sweep.pk}) in driver.server_tasks  # sent on the report
    driver.run(sweeps.start_sweep, sweep.pk)
    sweep.refresh_from_db()
    assert sweep.status == "running" and "queued_for_hangs" not in sweep.params
    driver.answer_all()
    sweep.refresh_from_db()
    assert (sweep.status, sweep.verdict) == ("finished", "pass")


def test_an_inspect_that_never_answers_holds_its_node_a_bounded_time(driver):
    for n in ("n0", "n1"):
        heartbeat(n)
    diagnosis = driver.run(hang_diagnoses.request, master=MASTER, nodes=["n0"])
    assert turns.inspecting(["n0", "n1"]) == [diagnosis.pk] and turns.inspecting(["n1"]) == []
    long_ago = time.time() - turns.INSPECT_HOLD_S - 1  # a dead agent: sent, never answered
    HangDiagnosis.objects.filter(pk=diagnosis.pk).update(inspects={"n0": {"sent": long_ago}})
    sweep = driver.sweep(kind="connectivity", nodes=["n0", "n1"])
    sweep.refresh_from_db()
    assert sweep.status == "running"


def test_a_second_diagnosis_waits_for_the_first_ones_inspect_rather_than_let_its_own_expire(driver):
    heartbeat("n0")
    first = driver.run(hang_diagnoses.request, master=MASTER, nodes=["n0"])
    second = driver.run(hang_diagnoses.request, master=MASTER, nodes=["n0"])
    assert inspected(driver.take()) == ["n0"]  # the first one's only
    assert hang_diagnoses.held(HangDiagnosis.objects.get(pk=second.pk)) == {"n0": {"after": first.pk}}
    assert driver.run(hang_diagnoses.send_held, second) == []
    driver.run(report, first, "n0")
    assert driver.run(hang_diagnoses.send_held, second) == ["n0"]
    assert [c["probe_id"] for c in driver.take()] == [second.pk]
    third = driver.run(hang_diagnoses.request, master=MASTER, nodes=["n0"])  # while the second's runs
    answer = hang_diagnoses.conclude(HangDiagnosis.objects.get(pk=third.pk))
    assert answer["looked"] == {
        "asked": ["n0"],
        "silent": [],
        "busy": {},
        "busy_inspecting": {"n0": second.pk},
        "errors": {},
    }
    assert f"not inspected, busy in hang diagnosis #{second.pk}: n0" in answer["why"]
