"""``manage.py hang`` end to end: the real stack and agent, a real two-rank job hung in its data loader."""

import json

import pytest

from cluster_health.models import HangDiagnosis, HangReport
from devtools.services import free_port
from tests.support.hung_jobs import job
from tests.support.sweep_setup import manage, wait_online

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True), pytest.mark.timeout(180)]


@pytest.fixture
def doctor_agent(stack):
    stack.start_agent("hd0")
    try:
        wait_online(["hd0"])
        yield stack
    finally:
        stack.stop_agent("hd0")


def test_it_names_the_rank_stuck_in_its_own_code_and_says_nothing_of_an_absent_job(doctor_agent, tmp_path):
    stack = doctor_agent
    with job("loader", tmp_path, launcher="direct") as selector:
        run = manage(
            stack,
            "hang",
            "--master",
            f"127.0.0.1:{selector.master_port}",
            "--nodes",
            "hd0",
            "--json",
            "--timeout",
            "40",
            timeout=90,
        )
    assert run.returncode == 2, run.stdout + run.stderr
    answer = json.loads(run.stdout)
    assert (answer["hung"], answer["verdict"]) == (True, "application")
    assert answer["job"] == {
        "master": f"127.0.0.1:{selector.master_port}",
        "slurm_job": None,
        "nodes": ["hd0"],
        "world_size": 2,
        "ranks_found": 2,
    }
    (culprit,) = answer["culprits"]
    assert (culprit["kind"], culprit["ranks"], culprit["nodes"]) == ("rank", [1], ["hd0"])
    assert "inside `load_batch` (hung_job.py:" in culprit["text"] and "not in `all_reduce`" in culprit["text"]
    assert {r["rank"]: r["in"]["collective"] for r in answer["ranks"]} == {0: "all_reduce", 1: None}
    assert answer["seconds"] < 30
    diagnosis = HangDiagnosis.objects.get(pk=answer["diagnosis"])  # kept: readable tomorrow
    assert (diagnosis.status, diagnosis.verdict, diagnosis.result["culprits"]) == (
        "finished",
        "application",
        answer["culprits"],
    )
    assert HangReport.objects.filter(diagnosis=diagnosis, node="hd0").exists()
    absent = manage(
        stack, "hang", "--master", f"127.0.0.1:{free_port()}", "--nodes", "hd0", "--timeout", "20", timeout=60
    )
    assert absent.returncode == 3, absent.stdout + absent.stderr
    assert absent.stdout.startswith("UNKNOWN") and "no rank of the job was found" in absent.stdout
