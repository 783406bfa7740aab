"""NCCL RAS's view of a hung job (agents.hangs.ras) and its use in the join (cluster_health.core.hangs).

The fixtures under tests/support/nccl_ras/ are written by hand in the layout ``ncclras -f json`` prints
(NCCL 2.28.7: src/ras/client_support.cc's jsonWriteHeader, jsonWriteRankData, jsonWriteMissingRank,
jsonWriteFooter), until a GPU run records real ones: this machine has no NCCL."""

from __future__ import annotations

import json
import shutil
import socket
from pathlib import Path

import pytest

from agents.hangs import ras
from cluster_health.core.hangs import diagnose
from devtools.services import free_port

FIXTURES = Path(__file__).resolve().parents[1] / "support" / "nccl_ras"
JOB_PIDS = {4101, 4102, 5201, 5202}
IN_ALL_REDUCE = {"collective": "all_reduce", "frame": None}


def fixture(name: str) -> str:
    return (FIXTURES / f"{name}.json").read_text()


def test_a_healthy_job_has_no_missing_or_failing_rank_and_another_jobs_communicators_are_left_out():
    healthy = ras.parse(fixture("healthy"), JOB_PIDS)
    ((comm,),) = [healthy["communicators"]]
    assert (comm["hash"], comm["size"], comm["ranks_found"], comm["missing"], comm["failing"]) == (
        "0x8c5e2f5a1b9d4e07",
        4,
        4,
        [],
        [],
    )
    assert healthy["nccl_version"] == "2.28.7" and healthy["timeouts"] == 0
    assert ras.parse(fixture("another-job"), JOB_PIDS)["communicators"] == []
    many = json.loads(fixture("dead-rank"))
    many["communicators"] = [{**c, "missing_ranks": []} for c in json.loads(fixture("healthy"))["communicators"]] * 100
    many["communicators"].append(json.loads(fixture("dead-rank"))["communicators"][0])
    kept = ras.parse(json.dumps(many), JOB_PIDS)["communicators"]
    assert len(kept) == ras.MAX_KEPT and kept[0]["missing"][0]["rank"] == 3  # the one that says something


def test_a_dead_rank_and_a_failing_one_are_named_and_the_join_blames_them():
    view = ras.parse(fixture("dead-rank"), JOB_PIDS)
    (comm,) = view["communicators"]
    assert comm["missing"] == [{"rank": 3, "host": "10.0.0.2", "pid": 5202, "unresponsive": True, "dead": True}]
    assert [(f["rank"], f["async_error"]) for f in comm["failing"]] == [(2, 6)]
    ranks = [
        {"rank": r, "node": f"gpu-{r // 2}", "pid": pid, "state": "sleeping", "where": IN_ALL_REDUCE, "moved": False}
        for r, pid in ((0, 4101), (1, 4102), (2, 5201))
    ]
    ranks[0]["ras"] = view
    out = diagnose(ranks, world_size=4)
    assert out["verdict"] == "node"
    texts = [c["text"] for c in out["culprits"]]
    assert texts[0] == (
        "NCCL RAS reports rank 3 of communicator 0x8c5e2f5a1b9d4e07 (4 ranks) on 10.0.0.2 (pid 5202) considered dead"
    )
    assert texts[1] == "NCCL RAS: rank 2 of communicator 0x8c5e2f5a1b9d4e07 (4 ranks) on gpu-1 reports NCCL error 6"
    assert out["culprits"][-1]["kind"] == "node" and out["culprits"][-1]["ranks"] == [3]  # and not found on any node
    quiet = [{**ranks[0], "ras": ras.parse(fixture("healthy"), JOB_PIDS)}, *ranks[1:]]
    assert diagnose(quiet, world_size=3)["verdict"] == "unknown"  # RAS healthy: the stacks decide, as without it


@pytest.mark.parametrize(
    "text, why",
    [
        ("not json", "not JSON"),
        ("[]", "an object with communicators"),
        ('{"communicators": [{"ranks": "x"}]}', "expected objects with ranks"),
        ('{"communicators": [{"ranks": [{"rank": 0, "host": "h", "status": {}, "pid": "1"}]}]}', "expected an integer"),
        ('{"communicators": [{"ranks": [{"rank": 0}]}]}', "with a status"),
        (
            '{"communicators": [{"ranks": [], "missing_ranks": [{"rank": 1, "host": "h", "pid": 2, "status": {}}]}]}',
            "true or false",
        ),
        ("[" * 100000, "not JSON"),
    ],
)
def test_hostile_ras_output_is_refused(text, why):
    with pytest.raises(ras.RasError, match=why):
        ras.parse(text)


def test_only_a_loopback_port_from_the_ranks_environment_is_asked():
    assert ras.port_of({}) == 28028
    assert ras.port_of({"NCCL_RAS_ADDR": "localhost:29001"}) == 29001
    assert ras.port_of({"NCCL_RAS_ADDR": "[::1]:29002"}) == 29002
    assert ras.port_of({"NCCL_RAS_ADDR": "10.0.0.9:28028"}) is None  # never off the node on a job's say-so
    assert ras.port_of({"NCCL_RAS_ENABLE": "0"}) is None


def test_ras_is_queried_only_when_its_port_answers_with_a_bounded_ncclras_call(tmp_path):
    # A stand-in for NCCL's client (no NCCL here): prints what ncclras prints, records how it was called.
    client = tmp_path / "ncclras"
    client.write_text(f'#!/bin/sh\necho "$@" > {tmp_path}/argv\ncat {FIXTURES}/dead-rank.json\n')
    client.chmod(0o755)
    assert ras.query(free_port(), JOB_PIDS, client=str(client)) is None  # nobody answers: not run
    assert not (tmp_path / "argv").exists()
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(4)
    port = listener.getsockname()[1]
    try:
        view = ras.query(port, JOB_PIDS, client=str(client))
        assert view["communicators"][0]["missing"][0]["pid"] == 5202
        assert (tmp_path / "argv").read_text().split() == ["-f", "json", "-p", str(port), "-t", "10"]
        client.write_text("#!/bin/sh\necho '{\"communicators\": 5}'\n")
        assert "an object with communicators" in ras.query(port, JOB_PIDS, client=str(client))["error"]
        if shutil.which("ncclras") is None:
            assert "ncclras is not installed" in ras.query(port, JOB_PIDS)["error"]
    finally:
        listener.close()
