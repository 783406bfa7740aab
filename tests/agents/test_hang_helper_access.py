"""Who the inspect helper answers (agents/hangs/inspect.py): root, the agent's user and the owner of the job
asked about, told by the socket's peer credentials; and the Flight Recorder paths a job names, opened
without following a symbolic link anywhere along them (agents/hangs/flight.py)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

import pytest

from agents.hangs import flight
from devtools.services import free_port
from tests.agents.test_hang_flight import RECORDED

ROOT = Path(__file__).resolve().parents[2]

JOB_USER, OTHER_USER = 65534, 65533


@pytest.fixture
def shared_dir():
    """A folder every local user can reach (pytest's own is root's alone)."""
    path = tempfile.mkdtemp(prefix="inspect-callers-")
    os.chmod(path, 0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def helper_socket(shared_dir):
    """The helper as systemd runs it: a socket every local user may connect to (SocketMode=0666), and for
    each connection ``--stdio`` with that connection as its standard input and output."""
    path = os.path.join(shared_dir, "inspect.sock")
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(path)
    os.chmod(path, 0o666)
    server.listen(4)
    server.settimeout(0.2)
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except TimeoutError:
                continue
            with conn:
                subprocess.run(
                    [sys.executable, "-m", "agents.hangs.inspect", "--stdio"],
                    stdin=conn,
                    stdout=conn,
                    timeout=60,
                    env={k: v for k, v in os.environ.items() if k != "CLUSTER_HEALTH_INSPECT_AGENT_USER"},
                )

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield path
    stop.set()
    thread.join(70)
    server.close()


def ask(path: str, request: dict, uid: int) -> dict:
    """The helper's answer to a request sent from a process of user ``uid`` (forked: the interpreter
    under /root is not every user's to run)."""
    read_end, write_end = os.pipe()
    child = os.fork()
    if child == 0:  # pragma: no cover (the child)
        code = 1
        try:
            os.close(read_end)
            os.setgroups([])
            os.setgid(uid)
            os.setuid(uid)
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
                conn.settimeout(30)
                conn.connect(path)
                conn.sendall(json.dumps(request).encode() + b"\n")
                conn.shutdown(socket.SHUT_WR)
                while chunk := conn.recv(65536):
                    os.write(write_end, chunk)
            code = 0
        finally:
            os._exit(code)
    os.close(write_end)
    chunks = []
    with os.fdopen(read_end, "rb") as answer:
        while chunk := answer.read(65536):
            chunks.append(chunk)
    _, status = os.waitpid(child, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    return json.loads(b"".join(chunks))


@pytest.mark.skipif(os.geteuid() != 0, reason="runs processes as other users")
@pytest.mark.timeout(120)
def test_the_helper_answers_root_and_the_jobs_owner_and_nobody_else(helper_socket):
    port = free_port()
    launch = {"RANK": "0", "WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)}
    rank = subprocess.Popen(
        ["sleep", "120"],
        user=JOB_USER,
        group=JOB_USER,
        env={"PATH": "/usr/bin:/bin", **launch},
    )
    try:
        request = {"master_addr": "127.0.0.1", "master_port": port, "interval_s": 0}
        other = ask(helper_socket, request, OTHER_USER)
        assert "ranks" not in other and "not the owner" in other["error"], other
        by_slurm = ask(helper_socket, {"slurm_job": "none-such", "interval_s": 0}, OTHER_USER)
        assert by_slurm.get("ranks") == []  # nothing of anyone's
        owner = ask(helper_socket, request, JOB_USER)
        assert [r["pid"] for r in owner["ranks"]] == [rank.pid], owner
        root = ask(helper_socket, request, 0)
        assert [r["pid"] for r in root["ranks"]] == [rank.pid], root
    finally:
        rank.send_signal(signal.SIGKILL)
        rank.wait(10)


def test_the_helper_answers_the_agents_user_named_by_its_unit():
    """The agent asks for a signed inspect command from the server: its user (a systemd DynamicUser, named
    by the helper's unit) is answered for any job, as root is."""
    from agents.hangs import inspect as helper

    assert helper.trusted_caller(0, None) and helper.trusted_caller(JOB_USER, "nobody")
    assert not helper.trusted_caller(OTHER_USER, "nobody")
    assert not helper.trusted_caller(JOB_USER, None) and not helper.trusted_caller(JOB_USER, "no-such-user")
    for unit in ("deploy/systemd/cluster-health-inspect@.service", "deploy/kubernetes/agent-daemonset.yaml"):
        assert "--agent-user" in (ROOT / unit).read_text(), unit


def test_a_dump_or_a_socket_behind_a_linked_folder_is_never_read(tmp_path):
    pid = os.getpid()
    real = tmp_path / "real"
    real.mkdir()
    (real / "fr_0").write_text((RECORDED / "loader-rank0.json").read_text())
    assert flight.read(pid, 0, {flight.DUMP_VARIABLE: f"{real}/fr_"})["pending"]["seq"] == 2
    (tmp_path / "link").symlink_to(real)
    found = flight.read(pid, 0, {flight.DUMP_VARIABLE: f"{tmp_path}/link/fr_"})
    assert "symbolic link" in found["error"], found

    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(real / "ws.sock"))
    server.listen(1)
    server.settimeout(0.5)
    try:
        found = flight.read(pid, 0, {flight.SOCKET_VARIABLE: f"{tmp_path}/link/ws.sock"})
        assert "symbolic link" in found["error"], found
        with pytest.raises(TimeoutError):
            server.accept()  # never connected to
    finally:
        server.close()
