"""Jobs hung at init_process_group, read from outside (agents/hangs) and diagnosed (core/init_hangs.py):
real Gloo ranks and a real torchrun on loopback, hung for real before any collective: a rank never
started (and a torchrun node that never joined), the master's port held by another program, a rank
pointing at another master."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from agents.hangs import procs, stacks
from agents.hangs.inspect import entries, inspect
from cluster_health.core.hangs import EXIT_CODES, diagnose
from devtools.hang_jobs import JOB
from devtools.services import free_port

pytestmark = pytest.mark.timeout(120)

TORCHRUN = Path(sys.executable).with_name("torchrun")
NOWHERE = "198.51.100.7"  # TEST-NET-2: no host answers there (unreachable or unanswered, never a store)


@contextlib.contextmanager
def started(commands: list[tuple[list[str], dict[str, str]]], log: Path) -> Iterator[list[subprocess.Popen]]:
    """Each command in a session of its own, killed with its whole process group afterwards."""
    out = log.open("wb")
    procs_ = [
        subprocess.Popen(
            argv, env={**os.environ, "OMP_NUM_THREADS": "1", **env}, stdout=out, stderr=out, start_new_session=True
        )
        for argv, env in commands
    ]
    try:
        yield procs_
    finally:
        for p in procs_:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, signal.SIGKILL)
            p.wait(10)
        out.close()


def rank(r: int, master: str, port: int, world: int = 2) -> tuple[list[str], dict[str, str]]:
    env = {"RANK": str(r), "LOCAL_RANK": "0", "WORLD_SIZE": str(world), "MASTER_ADDR": master, "MASTER_PORT": str(port)}
    return [sys.executable, str(JOB), "init"], env


def wait_at_init(pids: list[int], log: Path, timeout: float = 60.0) -> None:
    """Until every process's main thread shows an init frame (torch imported, init_process_group entered)."""
    deadline = time.monotonic() + timeout
    waiting = set(pids)
    while waiting:
        waiting = {p for p in waiting if stacks.init_stage(stacks.dump(p).get("threads") or []) is None}
        if waiting and time.monotonic() > deadline:
            raise AssertionError(f"not at init: {waiting}\n{log.read_text(errors='replace')[-2000:]}")
        time.sleep(0.3)


def looked(port: int, nodes: list[str] | None = None) -> dict:
    """The node's report (its ranks, launchers, other-master ranks, port holders) and the diagnosis."""
    report = inspect(procs.JobSelector(master_addr="127.0.0.1", master_port=port), interval_s=0.5)
    found = [{**e, "node": "local"} for e in entries(report)]
    return {"report": report, "answer": diagnose(found, nodes=nodes or ["local"])}


def test_a_rank_never_started_and_a_torchrun_node_never_joined_are_named_missing(tmp_path):
    port, rdzv = free_port(), free_port()
    launcher = [str(TORCHRUN), "--nnodes", "2", "--node-rank", "0", "--nproc-per-node", "1"]
    launcher += ["--master-addr", "127.0.0.1", "--master-port", str(rdzv), str(JOB), "init"]
    log = tmp_path / "job.log"
    with started([rank(0, "127.0.0.1", port), (launcher, {})], log) as (rank0, agent):
        wait_at_init([rank0.pid, agent.pid], log)
        alone = looked(port, nodes=["local", "gpu-2"])
        waiting = looked(rdzv, nodes=["local", "gpu-2"])
    answer = alone["answer"]
    (culprit,) = answer["culprits"]
    assert (answer["verdict"], EXIT_CODES[answer["verdict"]]) == ("node", 2)
    assert (culprit["kind"], culprit["ranks"], culprit["nodes"]) == ("node", [1], ["gpu-2"])
    assert "rank(s) 1 of 2 never arrived" in culprit["text"] and "1 at store_wait" in culprit["text"]
    init = answer["init"]
    assert (init["arrived"], init["missing"], init["expected_nodes"]) == ([0], [1], ["gpu-2"])
    assert [(w["rank"], w["stage"]) for w in init["waiting"]] == [(0, "store_wait")]
    # torchrun: no rank exists yet; its launcher waits at the static rendezvous for node rank 1.
    at_rdzv = waiting["answer"]
    (launcher_seen,) = waiting["report"]["launchers"]
    assert launcher_seen["launch"]["nnodes"] == "2" and launcher_seen["launch"]["node_rank"] == "0"
    assert set(launcher_seen["launch"]) <= {
        "master_addr",
        "master_port",
        "rdzv_endpoint",
        "rdzv_backend",
        "nnodes",
        "node_rank",
        "nproc_per_node",
        "endpoint",
        "standalone",
    }  # torchrun's options only: nothing of the job's own arguments
    assert waiting["report"]["ranks"] == []
    assert at_rdzv["verdict"] == "node" and at_rdzv["init"]["stage"] == "rendezvous"
    assert at_rdzv["init"]["missing_node_ranks"] == [1] and at_rdzv["init"]["launchers"][0]["node_rank"] == "0"
    assert (
        at_rdzv["culprits"][0]["nodes"] == ["gpu-2"]
        and "node rank(s) 1 of 2 never joined" in at_rdzv["culprits"][0]["text"]
    )


def test_the_masters_port_held_by_another_program_is_named_with_its_owner(tmp_path):
    port = free_port()
    holder = socket.socket()
    holder.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    holder.bind(("0.0.0.0", port))
    holder.listen(8)
    log = tmp_path / "job.log"
    try:
        with started([rank(0, "127.0.0.1", port), rank(1, "127.0.0.1", port)], log) as (rank0, rank1):
            wait_at_init([rank1.pid], log)
            deadline = time.monotonic() + 60
            while rank0.poll() is None and time.monotonic() < deadline:  # EADDRINUSE: rank 0 gives up
                time.sleep(0.2)
            out = looked(port)
    finally:
        holder.close()
    assert "EADDRINUSE" in log.read_text(errors="replace")
    answer = out["answer"]
    culprit = answer["culprits"][0]
    assert (answer["verdict"], culprit["kind"], culprit["ranks"]) == ("application", "node", [1])
    assert culprit["evidence"]["listener"]["pid"] == os.getpid()
    assert culprit["hint"].startswith("MASTER_PORT=") and f"MASTER_PORT {port} on local is held by" in culprit["text"]
    (waiting,) = answer["init"]["waiting"]
    assert (waiting["rank"], waiting["stage"], waiting["peer"]) == (1, "store_connect", f"127.0.0.1:{port}")
    assert answer["init"]["port_holders"][0]["port"] == port


def test_a_rank_pointing_at_another_master_is_named_with_the_masters_address(tmp_path):
    port = free_port()
    log = tmp_path / "job.log"
    with started([rank(0, "127.0.0.1", port), rank(1, NOWHERE, port)], log) as (rank0, rank1):
        wait_at_init([rank0.pid, rank1.pid], log)
        out = looked(port)
    answer = out["answer"]
    (culprit,) = answer["culprits"]
    assert (answer["verdict"], culprit["kind"], culprit["ranks"]) == ("application", "rank", [1])
    assert culprit["hint"] == f"MASTER_ADDR=127.0.0.1 on local (it has MASTER_ADDR={NOWHERE})"
    init = answer["init"]
    assert (init["arrived"], init["missing"], init["other_master"][0]["master"]) == ([0], [], NOWHERE)
    stages = {w["rank"]: (w["stage"], w["peer"]) for w in init["waiting"]}
    assert stages == {0: ("store_wait", None), 1: ("store_connect", f"{NOWHERE}:{port}")}


def test_torchruns_options_are_read_and_nothing_of_the_jobs_own_arguments():
    argv = ["/venv/bin/python", "/venv/bin/torchrun", "--nnodes=1:4", "--node_rank", "2", "--rdzv-backend", "c10d"]
    argv += ["--rdzv-endpoint", "gpu-0:29400", "--standalone", "train.py", "--master-port", "1", "--token=s3cret"]
    options = procs.launcher_options(argv)
    assert options == {
        "nnodes": "1:4",
        "node_rank": "2",
        "rdzv_backend": "c10d",
        "rdzv_endpoint": "gpu-0:29400",
        "standalone": "1",
        "endpoint": "gpu-0:29400",
    }
    static = procs.launcher_options(["python", "-m", "torch.distributed.run", "--master-addr", "10.0.0.1", "x.py"])
    assert static is not None and static["endpoint"] == "10.0.0.1:29500" and static["node_rank"] == "0"
    assert procs.launcher_options(["python", "train.py", "--master-port", "29500"]) is None
