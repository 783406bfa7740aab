"""A link dropped under a running job: two hosts of a namespace test bed, one rank each, their agents
and the real server side. ``manage.py hang`` finds the ranks waiting in the same collective, their
sockets holding unacknowledged bytes, the live probe between the two hosts failing: the network."""

import json
import time

import pytest

from devtools import hang_jobs
from devtools.services import free_port
from tests.support.artifacts import ARTIFACTS
from tests.support.fault_bed import start_agents
from tests.support.sweep_setup import manage, wait_online

pytestmark = [pytest.mark.netns, pytest.mark.e2e, pytest.mark.django_db(transaction=True), pytest.mark.timeout(240)]

NAMES = ["host1", "host2"]


def test_a_link_dropped_under_a_running_job_is_named_the_network(make_testbed, stack, tmp_path):
    bed = make_testbed(2)
    start_agents(bed, stack)
    wait_online(NAMES)
    port = free_port()
    master = bed.host("host1").address
    ranks = []
    try:
        ranks = hang_jobs.start_on_bed(bed, NAMES, port, tmp_path / "job.log")
        bed.firewall_between("host1", "host2")  # the job's next all_reduce never completes
        time.sleep(3.0)
        run = manage(
            stack,
            "hang",
            "--master",
            f"{master}:{port}",
            "--nodes",
            ",".join(NAMES),
            "--json",
            "--timeout",
            "60",
            timeout=120,
        )
    finally:
        bed.heal("host1", "host2")
        hang_jobs.stop(ranks)
    assert run.returncode == 2, run.stdout + run.stderr
    answer = json.loads(run.stdout)
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    (ARTIFACTS / "hang-link-dropped.json").write_text(json.dumps(answer, indent=1))
    assert (answer["verdict"], answer["job"]["ranks_found"], answer["job"]["nodes"]) == ("network", 2, NAMES)
    assert {(r["rank"], r["node"]) for r in answer["ranks"]} == {(0, "host1"), (1, "host2")}
    assert all(r["in"]["collective"] == "all_reduce" for r in answer["ranks"])
    culprit = answer["culprits"][0]
    assert culprit["kind"] == "link" and set(culprit["nodes"]) <= set(NAMES)
    assert answer["seconds"] < 60
