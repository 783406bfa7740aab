"""A slow host under a running job: three hosts of a namespace test bed, one rank each (Gloo, its Flight
Recorder on, 1 MiB all_reduces), their agents and the real server side. With host3's egress shaped (tc tbf),
``manage.py hang --json`` answers ``slow`` (exit 1) and names host3's link from the live probe's busbw; the
same job once the shaping is lifted is ``progressing`` (exit 0): no alarm on a healthy job's jitter."""

import json
import shutil
import tempfile
import time
from pathlib import Path

import pytest

from devtools import hang_jobs
from devtools.services import free_port
from tests.support.artifacts import ARTIFACTS
from tests.support.fault_bed import start_agents
from tests.support.sweep_setup import manage, wait_online

pytestmark = [pytest.mark.netns, pytest.mark.e2e, pytest.mark.django_db(transaction=True), pytest.mark.timeout(300)]

NAMES = ["host1", "host2", "host3"]


def hang(stack, master: str) -> tuple[int, dict]:
    run = manage(
        stack, "hang", "--master", master, "--nodes", ",".join(NAMES), "--json", "--timeout", "60", timeout=120
    )
    assert run.returncode in (0, 1, 2, 3), run.stdout + run.stderr
    return run.returncode, json.loads(run.stdout)


def test_a_slow_hosts_link_is_named_and_the_job_healed_is_progressing(make_testbed, stack, tmp_path, monkeypatch):
    bed = make_testbed(3)
    start_agents(bed, stack)
    wait_online(NAMES)
    monkeypatch.setenv("HUNG_JOB_FLOATS", str(256 * 1024))  # 1 MiB a step: a shaped link holds each step back
    port = free_port()
    master = f"{bed.host('host1').address}:{port}"
    sockets = Path(tempfile.mkdtemp(prefix="fr-", dir="/tmp"))
    ranks = []
    try:
        ranks = hang_jobs.start_on_bed(bed, NAMES, port, tmp_path / "job.log", flight=sockets)
        bed.shape("host3", 20)  # 20 Mbit/s out of host3
        time.sleep(6.0)  # every rank's recorder holds more than MIN_STEPS shaped steps
        slow_code, slow = hang(stack, master)
        bed.unshape("host3")
        time.sleep(3.0)  # the recorders' last steps are unshaped ones
        healthy_code, healthy = hang(stack, master)
    finally:
        bed.unshape("host3")
        hang_jobs.stop(ranks)
        shutil.rmtree(sockets, ignore_errors=True)
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    (ARTIFACTS / "hang-straggler-slow-host.json").write_text(json.dumps(slow, indent=1))
    (ARTIFACTS / "hang-straggler-healed.json").write_text(json.dumps(healthy, indent=1))
    assert (slow_code, slow["verdict"], slow["hung"], slow["job"]["ranks_found"]) == (1, "slow", False, 3), slow
    culprit = slow["culprits"][0]
    assert (culprit["kind"], culprit["subject"], culprit["nodes"], culprit["ranks"]) == (
        "link",
        "host3's link",
        ["host3"],
        [2],
    )
    link = culprit["evidence"]["link"]
    assert link["stalled"] or link["busbw_gbps"] < 0.5 * link["others_busbw_gbps"]  # stalled: moved too little
    assert culprit["evidence"]["steps"]["source"] == "flight recorder"
    assert (healthy_code, healthy["verdict"], healthy["culprits"]) == (0, "progressing", []), healthy
