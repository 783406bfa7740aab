"""A sweep asked for while a hang diagnosis inspects one of its nodes, on the real stack with real agents
and a real hung job: the inspect holds the agent's one command slot for longer than a probe may wait to
start, so the sweep waits its turn (cluster_health/sweeps/turns.py) instead of timing out a healthy link."""

import time

import pytest

from cluster_health import hang_diagnoses, sweeps
from cluster_health.models import HangReport, Sweep
from tests.support.hung_jobs import job
from tests.support.sweep_setup import wait_online

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True), pytest.mark.timeout(180)]

NODES = ["ht0", "ht1"]


@pytest.fixture
def two_agents(stack):
    for name in NODES:
        stack.start_agent(name)
    try:
        wait_online(NODES)
        yield stack
    finally:
        for name in NODES:
            stack.stop_agent(name)


def wait_until(predicate, timeout_s: float, what: str):
    deadline = time.monotonic() + timeout_s
    while not (value := predicate()):
        assert time.monotonic() < deadline, what
        time.sleep(0.2)
    return value


def test_a_sweep_asked_for_during_an_inspect_waits_for_its_report_and_passes(two_agents, tmp_path):
    with job("loader", tmp_path, launcher="direct") as selector:
        # The longest sampling interval: the inspect holds ht0 about as long as a probe may wait to start
        # (START_GRACE_S, 10 s), longer where the helper is slow (a Flight Recorder dump, py-spy on many ranks).
        diagnosis = hang_diagnoses.request(master=f"127.0.0.1:{selector.master_port}", nodes=["ht0"], interval_s=10)
        sweep = sweeps.request_sweep(source="command", kind="connectivity", nodes=NODES)
        queued = wait_until(
            lambda: (
                Sweep.objects.filter(pk=sweep.pk, status="pending", params__has_key="queued_for_hangs").first()
                or Sweep.objects.exclude(status="pending").filter(pk=sweep.pk).first()
            ),
            20,
            "the sweep neither queued nor started",
        )
        report = wait_until(lambda: HangReport.objects.filter(diagnosis=diagnosis).first(), 60, "no inspect report")
        done = wait_until(lambda: Sweep.objects.filter(pk=sweep.pk, finished__isnull=False).first(), 60, "no end")
    assert (done.status, done.verdict) == ("finished", "pass"), done.error
    assert (queued.status, queued.params.get("queued_for_hangs")) == ("pending", [diagnosis.pk])
    assert done.started >= report.received  # its probes started once the inspect was over
    assert sorted(r["rank"] for r in report.ranks) == [0, 1] and not report.error  # which saw the whole job
