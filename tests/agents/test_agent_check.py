"""`python -m agents check`: seconds, local, no torch import; exit 0 pass, 1 fail with the reason on stderr."""

import json
import subprocess
import sys
import time

import pytest
from django.contrib.auth.models import User

from agents import check
from cluster_health.models import ApiToken
from devtools.services import agent_args, stop_process
from devtools.sweep_driver import heartbeat

ETH0 = {"name": "eth0", "up": True, "loopback": False, "mtu": 1500, "addresses": ["10.0.0.5"]}
LO = {"name": "lo", "up": True, "loopback": True, "mtu": 65536, "addresses": ["127.0.0.1"]}
HERE = check.local_versions()


def run_check(*args, timeout=60):
    # Reports whether torch got imported, after the command's own output, on a line of its own.
    code = (
        "import sys; from agents import cli; rc = cli.main(sys.argv[1:]); "
        "print('TORCH_IMPORTED=%s' % ('torch' in sys.modules), file=sys.stderr); sys.exit(rc)"
    )
    return subprocess.run([sys.executable, "-c", code, "check", *args], capture_output=True, text=True, timeout=timeout)


def test_it_fails_when_the_expected_interface_is_missing_or_down():
    assert check.interface_checks([LO, ETH0], "eth0")[1]["status"] == "pass"
    missing = check.interface_checks([LO, ETH0], "ib0")[1]
    assert missing["status"] == "fail" and "ib0" in missing["detail"]
    down = check.interface_checks([LO, {**ETH0, "up": False}], "eth0")
    assert [c["status"] for c in down] == ["fail", "fail"]


def test_it_fails_a_hostname_that_resolves_only_to_loopback_unless_gloo_is_pinned():
    host = {"hostname": "gpu-7", "resolves_to": ["127.0.1.1"], "loopback": True}
    assert check.hostname_check(host, {})["status"] == "fail"
    assert check.hostname_check(host, {"GLOO_SOCKET_IFNAME": "eth0"})["status"] == "warn"
    assert check.hostname_check({"hostname": "gpu-7", "resolves_to": ["10.0.0.5"]}, {})["status"] == "pass"


def test_it_compares_versions_and_gpus_with_the_cluster():
    got = check.version_checks(
        {"torch": "2.5.1", "cuda": "12.4", "nccl": None}, {"torch": "2.5.1", "cuda": "12.1", "nccl": "2.21.5"}
    )
    assert [(c["name"], c["status"]) for c in got] == [
        ("torch_version", "pass"),
        ("cuda_version", "fail"),
        ("nccl_version", "fail"),
    ]
    assert "12.4 here, the cluster runs 12.1" in got[1]["detail"]
    assert check.gpu_check({"devices": [{}] * 7, "error": None}, 8)["status"] == "fail"
    assert check.gpu_check({"devices": [{}] * 8}, 8)["status"] == "pass"
    assert check.gpu_check({"devices": []}, 0) is None  # a CPU node is not asked for GPUs


def test_it_reads_versions_without_importing_torch():
    code = "import sys; from agents import check; v = check.local_versions(); print('torch' in sys.modules, v)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=30).stdout
    assert out.startswith("False") and HERE["torch"] in out


def test_it_passes_against_a_matching_expect_file_in_well_under_a_second(tmp_path):
    expect = tmp_path / "expected.json"
    expect.write_text(json.dumps({"versions": {"torch": HERE["torch"]}, "interface": "lo"}))
    started = time.monotonic()
    run = run_check("--json", "--expect", str(expect), "--no-agent", "--name", "n0")
    elapsed = time.monotonic() - started
    report = json.loads(run.stdout)
    names = {c["name"]: c["status"] for c in report["checks"]}
    assert names["torch_version"] == "pass" and names["expected_interface"] == "pass"
    assert set(report) >= {"checks", "verdict"}
    assert "TORCH_IMPORTED=False" in run.stderr
    assert run.returncode == (1 if report["verdict"] == "fail" else 0)
    assert elapsed < 5, elapsed


def test_it_exits_1_with_the_reason_on_stderr_when_versions_differ(tmp_path):
    expect = tmp_path / "expected.json"
    expect.write_text(json.dumps({"versions": {"torch": "1.0.0"}}))
    run = run_check("--expect", str(expect), "--no-agent")
    assert run.returncode == 1
    assert f"cluster-health check: torch_version: torch {HERE['torch']} here, the cluster runs 1.0.0" in run.stderr


def test_it_finds_a_running_agent_process(redis_url, tmp_path):
    assert check.agent_checks([], None)[0]["status"] == "fail"
    from devtools.services import spawn

    proc = spawn(agent_args("chk-a", "127.0.0.1", redis_url), log_path=tmp_path / "agent.log")
    try:
        deadline = time.monotonic() + 10
        while proc.pid not in check.agent_processes() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert proc.pid in check.agent_processes()
    finally:
        stop_process(proc)


@pytest.mark.django_db(transaction=True)
def test_it_fetches_the_expected_set_from_the_server(live_server, tmp_path):
    facts = {
        "versions": {"torch": HERE["torch"], "cuda": None, "nccl": None},
        "interfaces": [LO, {**ETH0, "name": "lo-data", "addresses": ["127.0.0.1"]}],
        "gpus": {"devices": []},
    }
    odd = {**facts, "versions": {**facts["versions"], "torch": "2.0.0"}}
    heartbeat("n0", facts=facts), heartbeat("n1", facts=facts), heartbeat("n2", facts=odd), heartbeat("n3", facts=facts)
    user = User.objects.create_user("check", password="pw-check-123")
    token = tmp_path / "token"
    token.write_text(ApiToken.issue(user, "health check", scope=ApiToken.READ)[1])
    run = run_check("--json", "--server", live_server.url, "--token-file", str(token), "--name", "n0", "--no-agent")
    report = json.loads(run.stdout)
    names = {c["name"]: c for c in report["checks"]}
    assert names["torch_version"]["status"] == "pass", report  # three of four, not n2's odd one
    assert names["expected_interface"]["detail"].startswith("lo up")  # the interface holding n0's address
    assert "server" not in names


@pytest.mark.django_db
def test_the_api_answers_the_majority_and_the_nodes_heartbeat(client):
    facts = {
        "versions": {"torch": "2.5.1", "cuda": "12.4", "nccl": "2.21.5"},
        "interfaces": [ETH0],
        "gpus": {"devices": [{}] * 8},
    }
    heartbeat("n0", address="10.0.0.5", facts=facts)
    heartbeat("n1", address="10.0.0.5", facts=facts)
    heartbeat("n2", address="10.0.0.5", facts={**facts, "versions": {**facts["versions"], "cuda": "12.1"}})
    heartbeat("n3", address="10.0.0.5", facts=facts)  # three of four run 12.4: a strong majority
    assert client.get("/api/expected").status_code == 401
    client.force_login(User.objects.create_user("viewer", password="pw-viewer-123"))
    data = client.get("/api/expected?node=n1").json()
    assert data["versions"] == {"torch": "2.5.1", "cuda": "12.4", "nccl": "2.21.5", "driver": None}
    assert (data["interface"], data["gpu_count"], data["nodes"]) == ("eth0", 8, 4)
    assert data["node"]["registered"] and data["node"]["online"]
    assert client.get("/api/expected?node=nope").json()["node"]["registered"] is False


def test_it_warns_and_still_checks_locally_when_the_server_is_down():
    from devtools.services import free_port

    run = run_check("--json", "--server", f"http://127.0.0.1:{free_port()}", "--no-agent")
    report = json.loads(run.stdout)
    assert report["checks"][0]["name"] == "server" and report["checks"][0]["status"] == "warn"
    assert any(c["name"] == "interfaces" for c in report["checks"])


class MalformedServer:
    """A real HTTP server on 127.0.0.1, in a thread, answering GET /api/expected with one malformed answer."""

    def __init__(self, answer: str):
        import http.server
        import socket
        import struct
        import threading

        def handle(handler: http.server.BaseHTTPRequestHandler) -> None:
            if answer == "reset":  # RST instead of an answer, as a web process killed mid-request
                handler.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                handler.close_connection = True
                return
            if answer == "slow":  # past the check's timeout, then nothing
                self.released.wait(check.SERVER_TIMEOUT_S + 5)
                return
            body, kind = BODIES[answer]
            handler.send_response(200)
            handler.send_header("Content-Type", kind)
            length = len(body) * (4 if answer == "truncated" else 1)
            handler.send_header("Content-Length", str(length))
            handler.end_headers()
            handler.wfile.write(body)
            handler.wfile.flush()
            handler.close_connection = True

        handler_class = type("Handler", (http.server.BaseHTTPRequestHandler,), {"do_GET": handle})
        handler_class.log_message = lambda *a: None
        self.released = threading.Event()
        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler_class)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.released.set()
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(10)


GOOD = {"versions": {"torch": "1.0.0"}, "interface": None, "gpu_count": 0, "nodes": 3}
BODIES = {
    "truncated": (json.dumps(GOOD).encode(), "application/json"),
    "list": (b"[]", "application/json"),
    "null": (b"null", "application/json"),
    "versions_a_string": (json.dumps({**GOOD, "versions": "2.5.1"}).encode(), "application/json"),
    "gpu_count_a_string": (json.dumps({**GOOD, "gpu_count": "eight"}).encode(), "application/json"),
    "node_a_list": (json.dumps({**GOOD, "node": ["n0"]}).encode(), "application/json"),
    "version_an_object": (json.dumps({**GOOD, "versions": {"torch": {"v": 1}}}).encode(), "application/json"),
    "html": (b"<!doctype html><html><body>502 Bad Gateway</body></html>", "text/html"),
}


@pytest.mark.parametrize("answer", [*BODIES, "reset", "slow"])
def test_a_malformed_or_failed_answer_from_the_server_is_a_warning_never_a_failure(answer):
    """A web restart mid-response, a proxy's error page or a server bug must not fail every node's
    check at once (a prolog would drain the fleet): the local checks run and decide alone."""
    with MalformedServer(answer) as server:
        run = run_check("--json", "--server", server.url, "--no-agent", "--name", "n0")
    assert "Traceback" not in run.stderr, run.stderr
    report = json.loads(run.stdout)
    first = report["checks"][0]
    assert (first["name"], first["status"]) == ("server", "warn"), report
    names = {c["name"] for c in report["checks"]}
    assert "interfaces" in names and not names & {"torch_version", "gpus", "agent_heartbeat"}
    local = [c for c in report["checks"] if c["name"] != "server"]
    assert run.returncode == (1 if any(c["status"] == "fail" for c in local) else 0)
