"""On a GPU node only (``scripts/test --gpu``): NCCL jobs hung at init on one real GPU, read from outside
(agents.hangs.inspect.inspect_job, as the agent runs it) and diagnosed (core.hangs): the verdict, the rank
that never arrived, where the one that did waits. Skipped, saying why, where CUDA is not available."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from agents.hangs import stacks
from agents.hangs.inspect import inspect_job
from cluster_health.core.hangs import EXIT_CODES, diagnose
from devtools.hang_jobs import JOB
from devtools.services import free_port

pytestmark = [pytest.mark.gpu, pytest.mark.timeout(240)]


@pytest.fixture(scope="module", autouse=True)
def cuda_here():
    """Asked in a child: this test process never initialises CUDA."""
    ask = "import json, torch; print(json.dumps([torch.__version__, torch.cuda.is_available()]))"
    out = subprocess.run([sys.executable, "-c", ask], capture_output=True, text=True, timeout=120)
    try:
        version, available = json.loads(out.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        pytest.skip(f"torch could not be imported to ask about CUDA: {out.stderr[-300:]}")
    if not available:
        pytest.skip(f"no CUDA here (torch {version}): an NCCL init hang needs a GPU; run scripts/test --gpu on one")


@pytest.fixture(autouse=True)
def py_spy_on_path(monkeypatch):
    """scripts/test --gpu installs into .gpu-site (pip --target): py-spy's binary is in its bin folder."""
    for entry in os.environ.get("PYTHONPATH", "").split(os.pathsep):
        if entry and Path(entry, "bin", "py-spy").exists():
            monkeypatch.setenv("PATH", f"{Path(entry, 'bin')}{os.pathsep}{os.environ.get('PATH', '')}")


@contextlib.contextmanager
def nccl_ranks(port: int, ranks: dict[int, dict[str, str]], log: Path):
    out = log.open("wb")
    started = []
    for r, extra in ranks.items():
        env = {
            **os.environ,
            "RANK": str(r),
            "LOCAL_RANK": "0",  # one GPU: cuda:0
            "WORLD_SIZE": "2",
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": str(port),
            "HUNG_JOB_BACKEND": "nccl",
            "OMP_NUM_THREADS": "1",
            **extra,
        }
        started.append(
            subprocess.Popen(
                [sys.executable, str(JOB), "init"], env=env, stdout=out, stderr=out, start_new_session=True
            )
        )
    try:
        yield started
    finally:
        for p in started:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, signal.SIGKILL)
            p.wait(10)
        out.close()


def at_init(pid: int, log: Path, timeout: float = 120.0) -> str:
    """The init stage the rank's stack shows, once it shows one (CUDA torch's import takes seconds)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = stacks.init_stage(stacks.dump(pid).get("threads") or [])
        if found:
            return str(found["stage"])
        time.sleep(0.5)
    raise AssertionError(f"rank never reached init:\n{log.read_text(errors='replace')[-2000:]}")


def inspected(port: int) -> dict:
    cmd = {"master_addr": "127.0.0.1", "master_port": port, "slurm_job": None, "interval_s": 1.0}
    found = [{**e, "node": "gpu-node"} for e in inspect_job(cmd)]
    return diagnose(found, nodes=["gpu-node", "gpu-node-2"])


def test_an_nccl_job_with_its_second_rank_never_started_names_it_missing(tmp_path):
    port = free_port()
    log = tmp_path / "nccl-alone.log"
    with nccl_ranks(port, {0: {}}, log) as (rank0,):
        at_init(rank0.pid, log)
        time.sleep(1.0)
        answer = inspected(port)
    assert (answer["verdict"], EXIT_CODES[answer["verdict"]]) == ("node", 2), answer
    culprit = answer["culprits"][0]
    assert (culprit["kind"], culprit["ranks"], culprit["nodes"]) == ("node", [1], ["gpu-node-2"])
    assert (answer["init"]["arrived"], answer["init"]["missing"]) == ([0], [1])
    assert [(w["rank"], w["stage"]) for w in answer["init"]["waiting"]] == [(0, "store_wait")]


def test_an_nccl_rank_on_a_missing_interface_leaves_the_other_waiting_at_init(tmp_path):
    """Rank 1's NCCL_SOCKET_IFNAME names no interface: its NCCL bootstrap fails and it exits, while rank 0
    (device_id: NCCL connects at init) waits for it."""
    port = free_port()
    log = tmp_path / "nccl-ifname.log"
    with nccl_ranks(port, {0: {}, 1: {"NCCL_SOCKET_IFNAME": "nosuchif0"}}, log) as (rank0, rank1):
        at_init(rank0.pid, log)
        rank1.wait(120)  # NCCL: "Bootstrap : no socket interface found"
        time.sleep(2.0)
        answer = inspected(port)
    (log.parent / "answer.json").write_text(json.dumps(answer, indent=1))
    assert answer["verdict"] == "node", answer
    assert answer["init"]["missing"] == [1] and answer["culprits"][0]["ranks"] == [1]
    (waiting,) = answer["init"]["waiting"]
    assert waiting["rank"] == 0 and waiting["stage"] in ("store_wait", "pair_connect"), waiting
