"""``manage.py hang`` end to end: the real stack and agent, a real two-rank job hung in its data loader."""

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import pytest

from agents.hangs import procs
from cluster_health.models import HangDiagnosis, HangReport
from devtools.hang_jobs import JOB
from devtools.services import free_port
from tests.support.action_fixtures import SlurmCluster
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


def test_a_job_named_by_its_slurm_job_id_is_found_through_slurmctld_and_diagnosed(doctor_agent, tmp_path):
    """A real slurmctld and slurmd on loopback run the job (sbatch), its Flight Recorder on; ``--slurm-job``
    takes its node from slurmctld and its ranks from their SLURM_JOB_ID."""
    stack = doctor_agent
    cluster = SlurmCluster(tmp_path / "slurm", ["hd0"], cpus=2).start()
    job_id, sockets = None, ""
    try:
        cluster.start_slurmd("hd0")
        port, out = free_port(), tmp_path / "job.out"
        sockets = tempfile.mkdtemp(prefix="fr-", dir="/tmp")  # a socket's address is at most 107 bytes
        script = tmp_path / "job.sh"
        script.write_text(
            "#!/bin/sh\n"
            f"export MASTER_ADDR=127.0.0.1 MASTER_PORT={port} WORLD_SIZE=2 OMP_NUM_THREADS=1\n"
            f"export TORCH_FR_BUFFER_SIZE=2000\n"  # its Flight Recorder on, each rank's worker server its own socket
            f"for r in 0 1; do RANK=$r LOCAL_RANK=$r TORCH_WORKER_SERVER_SOCKET={sockets}/rank$r.sock "
            f"{sys.executable} {JOB} loader & done\n"
            "wait\n"
        )
        job_id = cluster.run("sbatch", "--parsable", "-N1", "-n2", f"--output={out}", str(script)).strip()
        deadline = time.monotonic() + 90
        while not out.exists() or out.read_text(errors="replace").count("ready") < 2:
            assert time.monotonic() < deadline, out.read_text(errors="replace")[-2000:] if out.exists() else "no output"
            time.sleep(0.5)
        time.sleep(1.0)  # rank 0 into its second all_reduce, rank 1 into its loader
        run = subprocess.run(
            [sys.executable, "manage.py", "hang", "--slurm-job", job_id, "--json", "--timeout", "40"],
            env={**stack.env, "SLURM_CONF": str(cluster.conf)},
            capture_output=True,
            text=True,
            timeout=90,
        )
        assert run.returncode == 2, run.stdout + run.stderr
        answer = json.loads(run.stdout)
        assert answer["job"] == {
            "master": None,
            "slurm_job": job_id,
            "nodes": ["hd0"],
            "world_size": 2,
            "ranks_found": 2,
        }
        (culprit,) = answer["culprits"]
        assert (answer["verdict"], culprit["ranks"]) == ("application", [1]) and "`load_batch`" in culprit["text"]
        # The same verdict as the job above without it, now with Flight Recorder's sequence numbers.
        assert "not in `all_reduce` #2 on default_pg" in culprit["text"]
        assert {r["rank"]: (r["in"]["collective"], r["in"].get("seq")) for r in answer["ranks"]} == {
            0: ("all_reduce", 2),
            1: (None, None),
        }
        assert answer["seconds"] < 30
    finally:
        if job_id:
            subprocess.run(["scancel", job_id], env=cluster.env, capture_output=True, timeout=20)
            for r in procs.find_ranks(procs.JobSelector(slurm_job=job_id)):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(r.pid, signal.SIGKILL)
        cluster.stop()
        shutil.rmtree(sockets, ignore_errors=True)
