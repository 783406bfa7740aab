"""A server outage drains nothing: the real Slurm health check and prolog run against the real
slurmctld while the server side stops hearing the nodes for longer than the online window.

The agents keep running; only the server worker (and with it the ingest consumer) is stopped,
so the server answers /api/expected and says every node is silent, the situation of a worker
restart, a database failover or a stalled consumer. The check warns and no node is drained;
a node whose own agent is gone still fails it.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.contrib.auth.models import User

from cluster_health.models import ApiToken
from devtools import services
from tests.support.action_fixtures import SlurmCluster
from tests.support.sweep_setup import wait_online

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True), pytest.mark.timeout(240)]

ROOT = Path(__file__).resolve().parents[2]
HEALTHCHECK = ROOT / "deploy" / "slurm" / "cluster-health-healthcheck"
PROLOG = ROOT / "deploy" / "slurm" / "cluster-health-prolog"
NODES = ["outage-a", "outage-b"]


def node_env(tmp_path: Path, name: str, server: str, token: Path, env: dict) -> dict:
    """The environment slurmd gives the scripts on node ``name``: its short host name, the check command."""
    shim = tmp_path / f"bin-{name}"
    shim.mkdir(exist_ok=True)
    (shim / "hostname").write_text(f"#!/bin/sh\necho {name}\n")
    (shim / "hostname").chmod(0o755)
    check = f"{sys.executable} -m agents check --server {server} --token-file {token} --name {name}"
    return {
        **env,
        "PATH": f"{shim}:{os.environ['PATH']}",
        "CLUSTER_HEALTH_CHECK": check,
        "PYTHONPATH": str(ROOT),
        # This machine's host name resolves only to loopback; the nodes say which interface Gloo takes.
        "GLOO_SOCKET_IFNAME": "lo",
    }


def run_script(script: Path, env: dict) -> subprocess.CompletedProcess:
    return subprocess.run(["sh", str(script)], env=env, capture_output=True, text=True, timeout=60)


def check_report(env: dict) -> dict:
    run = subprocess.run([*env["CLUSTER_HEALTH_CHECK"].split(), "--json"], env=env, capture_output=True, text=True)
    return json.loads(run.stdout)


@pytest.fixture
def outage_bed(stack, tmp_path):
    cluster = SlurmCluster(tmp_path / "slurm", NODES).start()
    for name in NODES:
        stack.start_agent(name)
    try:
        wait_online(NODES)
        token = tmp_path / "token"
        user = User.objects.create_user("health-check", password="pw-health-check-1")
        token.write_text(ApiToken.issue(user, "slurm health check", scope=ApiToken.READ)[1])
        server = stack.start_web()
        yield stack, cluster, {n: node_env(tmp_path, n, server, token, {**os.environ, **cluster.env}) for n in NODES}
    finally:
        for name in NODES:
            stack.stop_agent(name)
        if not stack.sup.alive("worker"):
            stack.start_server_worker()
        cluster.stop()


def test_a_server_that_stops_hearing_the_fleet_drains_no_node(outage_bed):
    stack, slurm, envs = outage_bed
    for name, env in envs.items():
        assert run_script(HEALTHCHECK, env).returncode == 0, name
    stack.sup.stop("worker")  # heartbeats now wait in Redis, unapplied
    online_after_s = float(stack.env["CLUSTER_HEALTH_ONLINE_AFTER_S"])

    def heartbeat_check(env: dict) -> dict:
        return next(c for c in check_report(env)["checks"] if c["name"] == "agent_heartbeat")

    services.wait_until(
        lambda: all(heartbeat_check(env)["status"] != "pass" for env in envs.values()),
        online_after_s + 30,
        interval=1.0,
        message="the server to say every node is silent",
    )
    for name, env in envs.items():
        report = check_report(env)
        beat = next(c for c in report["checks"] if c["name"] == "agent_heartbeat")
        assert beat["status"] == "warn" and "not acted on" in beat["detail"], report
        assert report["verdict"] == "warn", report
        health = run_script(HEALTHCHECK, env)
        prolog = run_script(PROLOG, env)
        assert (health.returncode, prolog.returncode) == (0, 0), (name, health.stderr, prolog.stderr)
    states = slurm.sinfo_states()
    assert not any("drain" in state.lower() for state, _ in states.values()), states
    assert all(reason in ("", "none") for _, reason in states.values()), states


def test_a_node_whose_own_agent_is_gone_is_still_drained(outage_bed):
    stack, slurm, envs = outage_bed
    stack.stop_agent(NODES[1])
    assert run_script(HEALTHCHECK, envs[NODES[0]]).returncode == 0
    failed = run_script(HEALTHCHECK, envs[NODES[1]])
    assert failed.returncode == 1
    states = slurm.sinfo_states()
    assert "drain" in states[NODES[1]][0].lower(), states
    assert states[NODES[1]][1].startswith("cluster-health check: agent_process"), states
    assert "drain" not in states[NODES[0]][0].lower(), states
