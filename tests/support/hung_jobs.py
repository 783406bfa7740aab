"""Real distributed jobs to hang for the hang-doctor tests: two Gloo ranks on loopback running
devtools/hung_job.py, launched by torchrun or one process per rank as srun launches them."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

from agents.hangs import procs
from devtools.hang_jobs import JOB
from devtools.services import free_port

TORCHRUN = Path(sys.executable).with_name("torchrun")


@contextmanager
def job(mode: str, tmp_path: Path, launcher: str = "torchrun", flight: bool = False):
    """A two-rank Gloo job on loopback, launched by torchrun or, as srun launches, one process per rank
    with its launch variables; every process in its own process group, killed afterwards. With
    ``flight``, its Flight Recorder on and each rank's worker server on a socket of its own (under
    torchrun, a shell wrapper names it by LOCAL_RANK, as a job script does: torchrun gives every rank
    the same environment)."""
    port = free_port()
    env = {**os.environ, "OMP_NUM_THREADS": "1", "A_SECRET_OF_THE_JOB": "do-not-leak"}
    sockets: dict[str, str] = {}
    if flight:
        folder = tempfile.mkdtemp(prefix="fr-", dir="/tmp")  # a socket's address is at most 107 bytes
        env["TORCH_FR_BUFFER_SIZE"] = "2000"
        sockets = {str(r): f"{folder}/rank{r}.sock" for r in (0, 1)}
    if launcher == "torchrun":
        argv = [str(TORCHRUN), "--nnodes", "1", "--nproc-per-node", "2", "--master-addr", "127.0.0.1"]
        script = [str(JOB), mode]
        if sockets:
            wrapper = f'TORCH_WORKER_SERVER_SOCKET={Path(sockets["0"]).parent}/rank$LOCAL_RANK.sock exec "$0" "$@"'
            script = ["--no-python", "/bin/sh", "-c", wrapper, sys.executable, *script]
        commands = [(argv + ["--master-port", str(port), *script], env)]
    else:
        launch = {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "WORLD_SIZE": "2", "SLURM_JOB_ID": f"j{port}"}
        commands = [
            (
                [sys.executable, str(JOB), mode],
                {**env, **launch, "RANK": str(r), "LOCAL_RANK": str(r), **_socket_of(sockets, r)},
            )
            for r in (0, 1)
        ]
    log_path = tmp_path / f"{mode}-{launcher}.log"
    log = log_path.open("wb")
    started = [
        subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=e, start_new_session=True)
        for argv, e in commands
    ]
    try:
        deadline = time.monotonic() + 90
        while log_path.read_text(errors="replace").count("ready") < 2:
            if time.monotonic() > deadline or any(p.poll() is not None for p in started):
                raise AssertionError(log_path.read_text(errors="replace")[-3000:])
            time.sleep(0.5)
        time.sleep(1.0)  # into the second collective (or the loader)
        yield procs.JobSelector(master_addr="localhost", master_port=port)
    finally:
        # torchrun starts each rank in a session of its own: the ranks are found and killed by their job too.
        ranks = [r.pid for r in procs.find_ranks(procs.JobSelector(master_addr="127.0.0.1", master_port=port))]
        for p in started:
            for sig in (signal.SIGCONT, signal.SIGKILL):
                try:
                    os.killpg(p.pid, sig)
                except ProcessLookupError:
                    pass
            p.wait(10)
        for pid in ranks:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)
                os.kill(pid, signal.SIGKILL)
        log.close()
        if sockets:
            shutil.rmtree(Path(sockets["0"]).parent, ignore_errors=True)


def _socket_of(sockets: dict[str, str], rank: int) -> dict[str, str]:
    return {"TORCH_WORKER_SERVER_SOCKET": sockets[str(rank)]} if sockets else {}
