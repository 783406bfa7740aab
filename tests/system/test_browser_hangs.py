"""The hang pages in a real browser: a kept diagnosis reads verdict and culprit first, each rank's
frames open on click, and the Hangs list links to it."""

import pytest
from django.contrib.auth.models import User
from django.utils import timezone

from cluster_health import defaults
from cluster_health.models import HangDiagnosis
from tests.support.artifacts import shot
from tests.support.dashboard_rows import make_nodes

pytestmark = [pytest.mark.e2e, pytest.mark.browser, pytest.mark.django_db(transaction=True), pytest.mark.timeout(120)]

LOADER = {"function": "load_batch", "file": "/job/train.py", "line": 88}
STEP = {"function": "step", "file": "/job/train.py", "line": 40}
# Where each rank is, from its Flight Recorder (cluster_health.core.hangs.position).
FLIGHT = {"source": "flight recorder", "last_completed": {"op": "all_reduce", "group": "default_pg", "pg": 0, "seq": 1}}


def kept_diagnosis() -> HangDiagnosis:
    make_nodes(["hx0", "hx1"])
    culprit = {
        "kind": "rank",
        "subject": "rank 1",
        "nodes": ["hx1"],
        "ranks": [1],
        "text": "rank 1 on hx1 is inside `load_batch` (train.py:88), not in `all_reduce` #2 on default_pg where the other "
        "rank waits (the last collective it completed: `all_reduce` #1 on default_pg): the job's code, not the network",
        "hint": "that rank's code never reaches the collective",
        "evidence": {},
    }
    ranks = [
        {
            "rank": 0,
            "node": "hx0",
            "pid": 11,
            "state": "sleeping",
            "in": {**FLIGHT, "collective": "all_reduce", "frame": STEP, "group": "default_pg", "seq": 2},
            "moved": False,
            "frames": [{"function": "all_reduce", "file": "/torch/distributed_c10d.py", "line": 1}, STEP],
            "connections": [
                {
                    "local": "10.0.0.1:4000",
                    "peer": "10.0.0.2:5000",
                    "unacked_bytes": 0,
                    "retransmits": 0,
                    "since_send_ms": 900,
                }
            ],
        },
        {
            "rank": 1,
            "node": "hx1",
            "pid": 12,
            "state": "sleeping",
            "in": {**FLIGHT, "collective": None, "frame": LOADER},
            "moved": True,
            "frames": [LOADER],
            "connections": [],
        },
    ]
    result = {
        "diagnosis": None,
        "job": {
            "master": "10.0.0.1:29500",
            "slurm_job": None,
            "nodes": ["hx0", "hx1"],
            "world_size": 2,
            "ranks_found": 2,
        },
        "hung": True,
        "verdict": "application",
        "culprits": [culprit],
        "why": None,
        "ranks": ranks,
        "pairs": [],
        "seconds": 6.2,
        "live_probe": None,
    }
    return HangDiagnosis.objects.create(
        master="10.0.0.1:29500",
        nodes=["hx0", "hx1"],
        status="finished",
        verdict="application",
        hung=True,
        result=result,
        finished=timezone.now(),
    )


def test_a_kept_diagnosis_reads_culprit_first_and_opens_a_ranks_frames(viewer_page):
    page = viewer_page
    diagnosis = kept_diagnosis()
    page.goto(f"{page.base}/hangs/{diagnosis.pk}/")
    assert "read by operators" in page.text_content("body")  # a job's stacks and peers are not every viewer's
    User.objects.get(username="viewer").groups.add(defaults.ensure_operators_group())
    page.goto(f"{page.base}/hangs/")
    page.click(f'tr[data-hang="{diagnosis.pk}"] a')
    page.wait_for_url(f"{page.base}/hangs/{diagnosis.pk}/")
    assert page.text_content("[data-hang-verdict]").strip() == "application"
    assert "inside `load_batch` (train.py:88)" in page.text_content("[data-hang-culprits]")
    cells = [page.locator(f'tr[data-rank="{r}"] td').all_text_contents() for r in (0, 1)]
    assert cells[0][4:6] == ["all_reduce #2 on default_pg", "all_reduce #1 on default_pg"]  # Flight Recorder's
    assert cells[1][4:6] == ["–", "all_reduce #1 on default_pg"]
    frames = page.locator("tr.frames").nth(1).locator("details")
    assert not frames.locator("ol").is_visible()
    frames.locator("summary").click()
    assert frames.locator("ol").is_visible() and "load_batch" in frames.locator("ol").text_content()
    assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
    shot(page, "hang-diagnosis")


def test_a_job_hung_at_init_shows_who_arrived_who_did_not_and_where_each_waits(viewer_page):
    """A two-rank job whose rank 1 never started: the page says so before any rank table, with the node it
    belongs on and where rank 0 waits (the store, for its peer)."""
    make_nodes(["hx0", "hx1"])
    User.objects.get(username="viewer").groups.add(defaults.ensure_operators_group())
    culprit = {
        "kind": "node",
        "subject": "hx1",
        "nodes": ["hx1"],
        "ranks": [1],
        "text": "rank 1 of 2 never arrived: it should run on hx1, where no rank of the job was found",
        "hint": "start the job on hx1, or check why its launcher exited",
        "evidence": {},
    }
    init = {
        "stage": "store_wait",
        "world_size": 2,
        "arrived": [0],
        "missing": [1],
        "missing_node_ranks": [],
        "waiting": [
            {
                "rank": 0,
                "node": "hx0",
                "pid": 11,
                "stage": "store_wait",
                "peer": None,
                "peer_state": None,
                "interface": "eth0",
            }
        ],
        "launchers": [],
        "other_master": [],
        "port_holders": [],
        "expected_nodes": ["hx0", "hx1"],
    }
    rank = {
        "rank": 0,
        "node": "hx0",
        "pid": 11,
        "state": "sleeping",
        "in": {"collective": None, "frame": STEP, "init": {"stage": "store_wait"}},
        "moved": False,
        "frames": [STEP],
        "connections": [],
    }
    job = {"master": "10.0.0.1:29500", "slurm_job": None, "nodes": ["hx0", "hx1"], "world_size": 2, "ranks_found": 1}
    result = {
        "diagnosis": None,
        "job": job,
        "hung": True,
        "verdict": "node",
        "culprits": [culprit],
        "why": None,
        "ranks": [rank],
        "pairs": [],
        "seconds": 1.4,
        "live_probe": None,
        "init": init,
    }
    diagnosis = HangDiagnosis.objects.create(
        master="10.0.0.1:29500",
        nodes=["hx0", "hx1"],
        status="finished",
        verdict="node",
        hung=True,
        result=result,
        finished=timezone.now(),
    )
    page = viewer_page
    page.goto(f"{page.base}/hangs/{diagnosis.pk}/")
    assert page.text_content("[data-hang-verdict]").strip() == "node"
    assert "rank 1 of 2 never arrived" in page.text_content("[data-hang-culprits]")
    assert page.text_content("#hang-init h2").strip() == "At init: store_wait"
    arrived = page.text_content("[data-init-arrived]")
    assert "1 of 2 ranks arrived (0)" in arrived and page.text_content("[data-init-missing]") == "1"
    assert "expected on hx0, hx1" in arrived
    assert page.locator('tr[data-init-rank="0"] td').all_text_contents()[:3] == ["0", "hx0", "store_wait"]
    assert page.locator('tr[data-rank="0"] td').all_text_contents()[4] == "store_wait (init)"
    assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
    shot(page, "hang-at-init")
