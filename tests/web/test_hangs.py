"""Hang diagnoses from the API and the pages: operators ask, anyone logged in reads; the answer is kept."""

import json

import pytest
from django.test import Client

from agents.contract import ContractError
from agents.hangs import contract as hangs_contract
from cluster_health import hang_diagnoses, vocabulary
from cluster_health.ingest import inspections
from cluster_health.models import HangDiagnosis, RejectedMessage
from cluster_health.queues import dispatch
from tests.support.dashboard_rows import PASSWORD, make_nodes, make_user

pytestmark = pytest.mark.django_db

IN_ALL_REDUCE = {"collective": "all_reduce", "frame": {"function": "step", "file": "/job/train.py", "line": 40}}
IN_LOADER = {"collective": None, "frame": {"function": "load_batch", "file": "/job/train.py", "line": 88}}


def logged_in(operator: bool) -> Client:
    user = make_user("op" if operator else "viewer", operator=operator)
    client = Client()
    assert client.login(username=user.username, password=PASSWORD)
    return client


def report(diagnosis: HangDiagnosis, node: str, ranks: list[dict]) -> str:
    return inspections.record_report(
        {"v": 1, "kind": "inspect", "probe_id": diagnosis.pk, "node": node, "ranks": ranks}
    )


def rank(n: int, where: dict, world: int = 2) -> dict:
    return {
        "rank": n,
        "pid": 10 + n,
        "world_size": world,
        "state": "sleeping",
        "where": where,
        "moved": False,
        "threads": [{"thread": "MainThread", "frames": [where["frame"]]}],
        "connections": [],
    }


def test_an_operator_asks_through_the_api_and_only_operators_read_the_kept_answer():
    make_nodes(["g0", "g1", "g2"])
    op = logged_in(operator=True)
    with dispatch.capture() as sent:
        answer = op.post(
            "/api/hangs",
            json.dumps({"master": "10.0.0.1:29500", "nodes": ["g0", "g1"]}),
            content_type="application/json",
        )
    assert answer.status_code == 202, answer.content
    pk = answer.json()["diagnosis"]
    commands = [kw["command"] for task, _q, kw, _e in sent if kw.get("command")]
    assert sorted(c["node"] for c in commands) == ["g0", "g1"] and all(c["kind"] == "inspect" for c in commands)
    assert {(c["master_addr"], c["master_port"], c["probe_id"]) for c in commands} == {("10.0.0.1", 29500, pk)}
    assert [(task, kw) for task, _q, kw, _e in sent if task == vocabulary.TASK_HANG] == [
        (vocabulary.TASK_HANG, {"diagnosis_id": pk, "timeout_s": 30.0})
    ]
    diagnosis = HangDiagnosis.objects.get(pk=pk)
    assert report(diagnosis, "g0", [rank(0, IN_ALL_REDUCE)]) == "applied"
    assert report(diagnosis, "g1", [rank(1, IN_LOADER)]) == "applied"
    assert report(diagnosis, "g1", []) == "duplicate"
    assert report(diagnosis, "g2", []) == "rejected"  # not asked to look
    assert "was not asked to look" in RejectedMessage.objects.get().error
    result = hang_diagnoses.conclude(diagnosis)
    assert (result["verdict"], result["culprits"][0]["ranks"], result["job"]["nodes"]) == (
        "application",
        [1],
        ["g0", "g1"],
    )
    viewer = logged_in(operator=False)  # a report holds a job's stacks, launch variables and peers: not theirs
    assert viewer.get(f"/api/hangs/{pk}").status_code == 403 and viewer.get("/api/hangs").status_code == 403
    assert viewer.get(f"/hangs/{pk}/").status_code == 403 and viewer.get("/hangs/").status_code == 403
    viewer = op
    kept = viewer.get(f"/api/hangs/{pk}").json()
    assert (kept["status"], kept["verdict"], kept["result"]["culprits"]) == (
        "finished",
        "application",
        result["culprits"],
    )
    page = viewer.get(f"/hangs/{pk}/").content.decode()
    assert (
        "inside `load_batch` (train.py:88)" in page
        and 'data-rank="1"' in page
        and "load_batch</code> (/job/train.py:88)" in page
    )
    listed = viewer.get("/hangs/").content.decode()
    assert f'href="/hangs/{pk}/"' in listed and "10.0.0.1:29500" in listed and "application" in listed


def test_only_operators_ask_and_bad_requests_are_refused_with_the_reason():
    make_nodes(["g0"])
    viewer = logged_in(operator=False)
    assert (
        viewer.post("/api/hangs", json.dumps({"master": "10.0.0.1:29500"}), content_type="application/json").status_code
        == 403
    )
    assert viewer.post("/hangs/", {"job": "10.0.0.1:29500"}).status_code == 403
    op = logged_in(operator=True)
    for body, words in (
        ({"master": "10.0.0.1"}, "expected MASTER_ADDR:MASTER_PORT"),
        ({}, "master (ADDR:PORT) or its Slurm job id"),
        ({"master": "10.0.0.1:1", "nodes": ["nope"]}, "unknown node"),
        ({"master": "10.0.0.1:1", "timeout_s": 5000}, "timeout_s"),
    ):
        answer = op.post("/api/hangs", json.dumps(body), content_type="application/json")
        assert answer.status_code == 400 and words in answer.json()["error"], (body, answer.content)
    with dispatch.capture():
        form = op.post("/hangs/", {"job": "slurm:81234", "nodes": "g0"})
    diagnosis = HangDiagnosis.objects.get()
    assert form.status_code == 302 and form["Location"] == f"/hangs/{diagnosis.pk}/"
    assert (diagnosis.slurm_job, diagnosis.nodes, diagnosis.source) == ("81234", ["g0"], "web")
    assert "Looking: the agents are reading" in op.get(form["Location"]).content.decode()
    with pytest.raises(ContractError, match="master_addr"):
        hangs_contract.validate_command(
            {"v": 1, "kind": "inspect", "probe_id": 1, "node": "g0", "master_addr": "a b", "master_port": 1}
        )


def test_a_rank_is_placed_on_the_node_its_own_connections_use_whichever_agent_saw_it():
    """Agents sharing a process table (containers, the test bed's hosts) each see every rank: a rank
    belongs to the node whose address its sockets use, once."""
    make_nodes(["h1", "h2"])  # 10.0.0.1 and 10.0.0.2
    with dispatch.capture():
        diagnosis = hang_diagnoses.request(master="10.0.0.1:29500", nodes=["h1", "h2"])
    on_h2 = {**rank(1, IN_LOADER), "connections": [{"local": "10.0.0.2:40100", "peer": "10.0.0.1:29500"}]}
    on_h1 = {**rank(0, IN_ALL_REDUCE), "connections": [{"local": "10.0.0.1:40200", "peer": "10.0.0.2:40100"}]}
    for node in ("h1", "h2"):  # both agents report both ranks
        report(diagnosis, node, [on_h1, on_h2])
    result = hang_diagnoses.conclude(diagnosis)
    assert [(r["rank"], r["node"]) for r in result["ranks"]] == [(0, "h1"), (1, "h2")]
    assert result["culprits"][0]["nodes"] == ["h2"] and result["job"]["ranks_found"] == 2
