"""What a hung job's ranks show, read from outside (agents/hangs), and the diagnosis joined from it
(cluster_health.core.hangs): real torchrun jobs on loopback, hung for real."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from agents.hangs import procs
from agents.hangs.inspect import inspect
from cluster_health.core.hangs import EXIT_CODES, diagnose
from devtools.services import free_port
from tests.support.hung_jobs import job

pytestmark = pytest.mark.timeout(150)


def node_view(selector: procs.JobSelector) -> list[dict]:
    """The inspect helper's report, as the agent runs it (its own process), with this node's name."""
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "agents.hangs.inspect",
            "--master",
            f"{selector.master_addr}:{selector.master_port}",
            "--interval",
            "1.5",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return [{**r, "node": "local"} for r in json.loads(out.stdout)["ranks"]]


def test_a_rank_stuck_in_its_data_loader_is_named_with_its_place(tmp_path):
    with job("loader", tmp_path) as selector:
        ranks = node_view(selector)
    assert sorted(r["rank"] for r in ranks) == [0, 1] and all(r["world_size"] == 2 for r in ranks)
    assert all(
        "A_SECRET_OF_THE_JOB" not in r["launch"] and set(r["launch"]) <= set(procs.LAUNCH_VARIABLES) for r in ranks
    )
    by_rank = {r["rank"]: r for r in ranks}
    assert by_rank[0]["where"]["collective"] == "all_reduce"
    assert by_rank[1]["where"]["frame"]["function"] == "load_batch"
    out = diagnose(ranks, world_size=2)
    (culprit,) = out["culprits"]
    assert (out["verdict"], culprit["kind"], culprit["ranks"]) == ("application", "rank", [1])
    assert "inside `load_batch` (hung_job.py:" in culprit["text"] and "not in `all_reduce`" in culprit["text"]
    assert EXIT_CODES[out["verdict"]] == 2


def test_a_stopped_rank_is_the_culprit_and_a_killed_one_is_missing(tmp_path):
    """Launched as srun launches (torchrun would tear the whole job down when one rank dies)."""
    with job("collective", tmp_path, launcher="direct") as selector:
        ranks = procs.find_ranks(selector)
        one = next(r for r in ranks if r.rank == 1)
        os.kill(one.pid, signal.SIGSTOP)
        stopped = diagnose(node_view(selector), world_size=2)
        assert stopped["verdict"] == "node"
        assert (
            stopped["culprits"][0]["text"]
            == "rank 1 on local is stopped (SIGSTOP or a debugger): the other ranks wait for it"
        )
        os.kill(one.pid, signal.SIGKILL)
        deadline = time.monotonic() + 20
        while procs.process_state(one.pid) not in ("gone", "zombie") and time.monotonic() < deadline:
            time.sleep(0.2)
        left = node_view(selector)
        assert [r["rank"] for r in left if r["state"] not in ("gone", "zombie")] == [0]
        by_job = procs.find_ranks(procs.JobSelector(slurm_job=f"j{selector.master_port}"))
        killed = diagnose([r for r in left if r["state"] not in ("gone", "zombie")], world_size=2)
    assert killed["verdict"] == "node" and killed["culprits"][0]["ranks"] == [1]
    assert [r.rank for r in by_job if r.state not in ("gone", "zombie")] == [0]  # found by its Slurm job id too


def test_a_training_job_is_progressing_and_an_absent_job_unknown(tmp_path):
    with job("train", tmp_path) as selector:
        out = diagnose(node_view(selector), world_size=2)
    assert (out["hung"], out["verdict"], EXIT_CODES[out["verdict"]]) == (False, "progressing", 0)
    nothing = inspect(procs.JobSelector(master_addr="127.0.0.1", master_port=free_port()), interval_s=0)
    absent = diagnose(nothing["ranks"], world_size=None)
    assert (absent["verdict"], EXIT_CODES["unknown"]) == ("unknown", 3) and "no rank of the job was found" in absent[
        "why"
    ]


def test_ranks_waiting_in_different_collectives_are_a_mismatch(tmp_path):
    with job("mismatch", tmp_path, launcher="direct") as selector:
        out = diagnose(node_view(selector), world_size=2)
    (culprit,) = out["culprits"]
    assert (out["verdict"], culprit["kind"]) == ("application", "mismatch")
    assert "rank(s) 0 in `all_reduce`" in culprit["text"] and "rank(s) 1 in `broadcast`" in culprit["text"]


def test_the_agent_asks_the_helper_on_its_socket_as_systemd_runs_it(tmp_path, monkeypatch):
    """Socket activation (Accept=yes) hands the helper one connection as stdin and stdout: the agent's
    request is a job selector, the answer bounded JSON; anything else is refused with the reason."""
    import socket
    import threading

    from agents.hangs import inspect as helper

    path = str(tmp_path / "inspect.sock")
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(path)
    server.listen(2)

    def serve(count: int) -> None:  # what systemd does for each connection
        for _ in range(count):
            conn, _ = server.accept()
            with conn:
                subprocess.run(
                    [sys.executable, "-m", "agents.hangs.inspect", "--stdio"], stdin=conn, stdout=conn, timeout=60
                )

    thread = threading.Thread(target=serve, args=(2,), daemon=True)
    thread.start()
    monkeypatch.setenv(helper.SOCKET_ENV, path)
    with job("loader", tmp_path, launcher="direct") as selector:
        ranks = helper.inspect_job(
            {"master_addr": "127.0.0.1", "master_port": selector.master_port, "slurm_job": None, "interval_s": 0.5}
        )
    assert sorted(r["rank"] for r in ranks) == [0, 1]
    with pytest.raises(ValueError, match="bad request"):
        helper._ask_socket(path, {"master_addr": "127.0.0.1", "master_port": 1, "command": "rm -rf /"})
    thread.join(30)
    server.close()


def test_py_spys_error_is_its_reason_not_its_backtrace():
    from agents.hangs.stacks import _reason

    stderr = (
        "Error: Failed to get stack traces\n\nCaused by:\n    0: Failed to suspend process\n"
        "    1: unexpected waitpid result\n\nStack backtrace:\n   0: anyhow\n   9: main\n"
    )
    assert _reason(stderr) == "Failed to get stack traces: Failed to suspend process"
    assert _reason("Permission denied (os error 13)\n") == "Permission denied (os error 13)"
