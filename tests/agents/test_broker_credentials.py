"""Agents reach a Redis that wants a password (an ACL user) or TLS; the password never shows in argv or logs."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import redis

from agents import broker, contract
from agents.rendezvous import RedisRendezvous
from cluster_health.queues import acl
from devtools.services import ROOT, RedisServer, make_tls_files, python_env, spawn, stop_process, wait_until
from tests.support.agent_fixtures import acl_broker, drain_until

PASSWORD = "s3cret-Broker-pw-7f2c"
SECURITY_DOC = Path(ROOT) / "docs" / "SECURITY.md"
pytestmark = pytest.mark.timeout(150)


def documented_agent_acl(node: str) -> str:
    """The ACL rule docs/SECURITY.md gives for a node's agent, for ``node``: the rule the docs show is the
    one ``manage.py enroll --broker`` writes and the one tested."""
    match = re.search(r"^user (agent-NAME on >NODE-PASSWORD .+)$", SECURITY_DOC.read_text(), re.M)
    assert match, "docs/SECURITY.md shows no ACL rule for agents"
    assert match.group(1) == acl.agent_rule("NAME", "NODE-PASSWORD")
    return acl.agent_rule(node, PASSWORD)


@pytest.fixture
def acl_redis(tmp_path):
    """Only named users: the server (everything) and two nodes' agents (the documented rule); the default user is off."""
    with acl_broker(
        tmp_path / "acl", f"{PASSWORD}-srv", documented_agent_acl("sec0"), documented_agent_acl("sec1")
    ) as server:
        yield server


@pytest.fixture
def tls_files(tmp_path):
    return make_tls_files(tmp_path / "tls")


@pytest.fixture
def tls_redis(tmp_path, tls_files):
    server = RedisServer(tmp_path / "tls-redis", password=PASSWORD, tls=tls_files)
    server.start()
    yield server
    server.stop()


def agent_env(broker_url: str, **extra) -> dict:
    return python_env(
        CLUSTER_HEALTH_BROKER_URL=broker_url,
        CLUSTER_HEALTH_ALLOW_UNSIGNED_AGENTS="1",
        CLUSTER_HEALTH_HEARTBEAT_S="1",
        **extra,
    )


AGENT_ARGS = [sys.executable, "-m", "agents", "run", "--name", "sec0", "--address", "127.0.0.1"]


def run_agent_briefly(env: dict, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in env.items() if k != "CLUSTER_HEALTH_AGENT_KEY_FILE"}
    return subprocess.run([*AGENT_ARGS, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)


def session_argv(leader: int) -> list[str]:
    """The command lines of every process in the agent's session (the agent and its probe processes)."""
    lines = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                session = int(f.read().rsplit(")", 1)[1].split()[3])
            if session == leader:
                with open(f"/proc/{entry}/cmdline", "rb") as f:
                    lines.append(f.read().replace(b"\0", b" ").decode(errors="replace"))
        except (OSError, IndexError, ValueError):
            continue
    return lines


def serve_until_heartbeat(tmp_path: Path, agent_url: str, reader_url: str, env: dict) -> tuple[dict, list[str], str]:
    """Start an agent with the URL in its environment; its first heartbeat, its processes' argv and its log."""
    log = tmp_path / "agent.log"
    proc = spawn(AGENT_ARGS, log, env=env)
    try:
        beat = drain_until(reader_url, lambda task, body: task == contract.TASK_HEARTBEAT, 60, environ=env)
        return beat["heartbeat"], session_argv(proc.pid), log.read_text()
    except AssertionError:
        raise AssertionError(log.read_text()[-3000:]) from None
    finally:
        stop_process(proc)


def test_an_agent_with_an_acl_password_sends_heartbeats_and_never_shows_the_password(tmp_path, acl_redis):
    agent_url, server_url = acl_redis.url_for("agent-sec0", PASSWORD), acl_redis.url_for("server", PASSWORD + "-srv")
    heartbeat, argv, log = serve_until_heartbeat(tmp_path, agent_url, server_url, agent_env(agent_url))
    assert heartbeat["node"] == "sec0"
    assert argv and not any(PASSWORD in line for line in argv), argv
    assert "redis://agent-sec0:***@127.0.0.1" in log and PASSWORD not in log


def test_the_agent_acl_refuses_what_agents_never_need(acl_redis):
    """One node's broker user reaches its own queue and the write side of its own ingest list: no other node's
    commands or ingest list, no server queue, none of the server's unacked entries, buffer or nonces."""
    client = redis.Redis.from_url(acl_redis.url_for("agent-sec0", PASSWORD))
    refused = [
        lambda: client.flushall(),
        lambda: client.get("cluster_health:ingest:0:lock"),  # the server's keys are out of reach
        lambda: client.rpush("cluster_health:ingest:0:pending", b"planted"),  # the ingest buffer
        lambda: client.hset("unacked", "tag", b'[{}, "", "cluster_health:ingest:0:pending"]'),  # kombu restores it
        lambda: client.zadd("unacked_index", {"tag": 1.0}),
        lambda: client.lpush("server", b"{}"),  # the server's own tasks (a replayed drain, a start)
        lambda: client.lrange("agent.sec1", 0, -1),  # another node's commands
        lambda: client.lpush("agent.sec1", b"{}"),
        lambda: client.hgetall("unacked.agent.sec1"),
        lambda: client.sadd("_kombu.binding.agent.sec1", "agent.sec1\x06\x16\x06\x16agent.sec0"),  # reroute
        lambda: client.lrange("server.ingest.sec0", 0, -1),  # its own ingest list: write only
        lambda: client.lpush("server.ingest.sec1", b"{}"),  # another node's: nothing, so it delays no other node
        lambda: client.lpush("server.ingest", b"{}"),  # the fleet's old shared list: nothing either
        lambda: client.get("cluster-health:nonce:sec1:abc"),
    ]
    for attempt in refused:
        with pytest.raises(redis.exceptions.NoPermissionError):
            attempt()
    assert client.lpush("server.ingest.sec0", b"{}") == 1  # what it may do: send, and use its own keys
    assert client.lpush("agent.sec0", b"{}") == 1 and client.hset("unacked.agent.sec0", "t", b"x") == 1
    assert client.set(contract.rendezvous_key("sec0", "abcdefgh"), b"1")  # its own probes' rendezvous
    client.close()


def test_an_agent_takes_and_acks_commands_as_its_own_broker_user(tmp_path, acl_redis):
    """The agent's worker keeps its taken commands in keys of its own (unacked.agent.NAME), the only ones
    its user may write: a command is taken, answered and acked, and heartbeats go on."""
    agent_url, server_url = acl_redis.url_for("agent-sec0", PASSWORD), acl_redis.url_for("server", PASSWORD + "-srv")
    env = agent_env(agent_url)
    log = tmp_path / "agent.log"
    proc = spawn(AGENT_ARGS, log, env=env)
    server = redis.Redis.from_url(server_url)
    try:
        drain_until(server_url, lambda task, body: task == contract.TASK_HEARTBEAT, 60, environ=env)
        from cluster_health.queues import dispatch

        server.lpush(
            "agent.sec0", dispatch.task_message(contract.TASK_PROBE, "agent.sec0", {"command": {"node": "sec0"}}, 60)
        )
        wait_until(lambda: "refused a probe command" in log.read_text(), 30, message="the command taken")
        wait_until(lambda: not server.llen("agent.sec0") and not server.hlen("unacked.agent.sec0"), 30, message="acked")
        drain_until(server_url, lambda task, body: task == contract.TASK_HEARTBEAT, 30, environ=env)
        assert not server.hlen("unacked"), "the server's unacked hash was written"
        assert "NOPERM" not in log.read_text() and "No permissions" not in log.read_text(), log.read_text()[-3000:]
        # Every command the agent ran was one its rule allows (Redis logs each one it refused).
        assert not [e for e in server.acl_log() if e.get("username") == "agent-sec0"], server.acl_log()
    finally:
        server.close()
        stop_process(proc)


def test_probes_meet_at_their_rendezvous_as_the_agent_user_and_over_tls(acl_redis, tls_redis, tls_files, monkeypatch):
    monkeypatch.setenv("CLUSTER_HEALTH_REDIS_CA_FILE", str(tls_files.ca))  # a probe inherits the agent's environment
    for url in (acl_redis.url_for("agent-sec0", PASSWORD), tls_redis.url):
        RedisRendezvous(url, "rdv-credentials-1", 30, master="sec0").publish("127.0.0.1", 29500)
        assert RedisRendezvous(url, "rdv-credentials-1", 30, master="sec0").lookup(timeout=5) == 29500


def test_a_wrong_password_stops_the_agent_with_a_clear_message(acl_redis):
    wrong = "not-the-" + PASSWORD
    out = run_agent_briefly(agent_env(acl_redis.url_for("agent-sec0", wrong)))
    assert out.returncode == 2, out.stderr[-2000:]
    assert "refused the credentials of user 'agent-sec0'" in out.stderr
    assert wrong not in out.stdout + out.stderr


def test_a_password_on_the_command_line_is_refused(acl_redis):
    out = run_agent_briefly(
        python_env(CLUSTER_HEALTH_ALLOW_UNSIGNED_AGENTS="1"), "--broker", acl_redis.url_for("agent-sec0", PASSWORD)
    )
    assert out.returncode == 2 and "CLUSTER_HEALTH_BROKER_URL" in out.stderr and "--broker-file" in out.stderr
    assert PASSWORD not in out.stderr


def test_the_broker_url_may_come_from_a_file(tmp_path, acl_redis):
    secret = tmp_path / "broker.url"
    secret.write_text(acl_redis.url_for("agent-sec0", "wrong-" + PASSWORD) + "\n")
    secret.chmod(0o644)
    out = run_agent_briefly(python_env(CLUSTER_HEALTH_ALLOW_UNSIGNED_AGENTS="1"), "--broker-file", str(secret))
    assert out.returncode == 2 and "readable by others" in out.stderr and "chmod 600" in out.stderr
    secret.chmod(0o600)
    out = run_agent_briefly(python_env(CLUSTER_HEALTH_ALLOW_UNSIGNED_AGENTS="1"), "--broker-file", str(secret))
    assert (
        out.returncode == 2 and "refused the credentials of user 'agent-sec0'" in out.stderr
    )  # the file's URL was used


def test_an_agent_reaches_a_tls_only_broker_with_the_ca_file(tmp_path, tls_redis, tls_files):
    env = agent_env(tls_redis.url, CLUSTER_HEALTH_REDIS_CA_FILE=str(tls_files.ca))
    heartbeat, argv, log = serve_until_heartbeat(tmp_path, tls_redis.url, tls_redis.url, env)
    assert heartbeat["node"] == "sec0"
    assert "rediss://:***@127.0.0.1" in log and PASSWORD not in log and not any(PASSWORD in a for a in argv)


def test_a_tls_broker_refuses_plaintext_and_an_agent_that_does_not_trust_its_certificate(tls_redis):
    plain = redis.Redis(host="127.0.0.1", port=tls_redis.port, password=PASSWORD, socket_timeout=5)
    with pytest.raises(redis.ConnectionError):
        plain.ping()
    plain.close()
    out = run_agent_briefly(agent_env(tls_redis.url))  # no CA file: the test CA is not in the system's store
    assert out.returncode == 2 and "TLS to the broker" in out.stderr and "CERTIFICATE_VERIFY_FAILED" in out.stderr
    assert PASSWORD not in out.stderr


SERVER_CLIENTS = """
import asyncio, django
django.setup()
from django.conf import settings
from channels.layers import get_channel_layer
from cluster_health.celery import app
from cluster_health import shared_redis
from cluster_health.ingest import buffer
from cluster_health.queues import backlog, dispatch

with app.connection_for_write() as conn:  # the Celery broker
    conn.ensure_connection(max_retries=1)
buffer._client().ping()  # the ingest buffer
shared_redis.client().ping()  # the nonce store and the probe commands' sender
dispatch._redis_send([("agent.probe", "tls-check.q", {"command": {"node": "x"}}, 5.0)])  # a command sent
assert shared_redis.client().llen("tls-check.q") == 1
from django.core.cache import cache
cache.set("tls-check", 1, 10)  # the cache (login-failure counts)
assert cache.get("tls-check") == 1
assert backlog.server_backlog() is not None  # what /metrics and the overview read

async def roundtrip():  # the channel layer
    layer = get_channel_layer()
    await layer.send("tls-check", {"type": "ping", "n": 1})
    return await asyncio.wait_for(layer.receive("tls-check"), 10)

assert asyncio.run(roundtrip())["n"] == 1
import logging
logging.getLogger("cluster_health").warning("broker at %s", settings.REDIS_URL)  # to stderr, redacted
print("server clients ok over", settings.REDIS_URL.split("://")[0])
"""


def run_server_side(url: str, **env) -> subprocess.CompletedProcess:
    base = python_env(DJANGO_SETTINGS_MODULE="cluster_health.settings", REDIS_URL=url, **env)
    base.pop("CLUSTER_HEALTH_PRODUCTION", None)
    return subprocess.run(
        [sys.executable, "-c", SERVER_CLIENTS], cwd=ROOT, env=base, capture_output=True, text=True, timeout=60
    )


def test_every_server_side_redis_client_works_over_tls_with_a_password(tls_redis, tls_files):
    out = run_server_side(tls_redis.url, CLUSTER_HEALTH_REDIS_CA_FILE=str(tls_files.ca))
    assert out.returncode == 0 and "server clients ok over rediss" in out.stdout, out.stderr[-3000:]
    assert "broker at rediss://:***@127.0.0.1" in out.stderr and PASSWORD not in out.stderr


def test_the_server_refuses_to_start_with_an_unreadable_ca_file(tls_redis, tmp_path):
    out = run_server_side(tls_redis.url, CLUSTER_HEALTH_REDIS_CA_FILE=str(tmp_path / "missing.crt"))
    assert out.returncode != 0 and "CLUSTER_HEALTH_REDIS_CA_FILE: cannot read" in out.stderr


def test_logs_show_broker_urls_without_their_passwords():
    line = f"Cannot connect to redis://agent:{PASSWORD}@10.0.0.1:6379/0 nor rediss://:{PASSWORD}@b:6380/1"
    assert broker.redact(line) == "Cannot connect to redis://agent:***@10.0.0.1:6379/0 nor rediss://:***@b:6380/1"
    assert broker.redact("redis://broker:6379/0 user@example.org") == "redis://broker:6379/0 user@example.org"


def test_tls_settings_that_cannot_work_are_refused_at_start(tls_files):
    url = "rediss://agent:pw@127.0.0.1:6380/0"
    assert broker.tls_options("redis://127.0.0.1:6379/0", {"CLUSTER_HEALTH_REDIS_CA_FILE": str(tls_files.ca)}) == {}
    with pytest.raises(broker.BrokerConfigError, match="set both or neither"):
        broker.tls_options(url, {"CLUSTER_HEALTH_REDIS_CERT_FILE": str(tls_files.cert)})
    with pytest.raises(broker.BrokerConfigError, match="cannot read"):
        broker.tls_options(url, {"CLUSTER_HEALTH_REDIS_CA_FILE": "/nonexistent/ca.crt"})


@pytest.mark.django_db
def test_enroll_gives_each_node_a_broker_user_that_a_real_redis_takes(tmp_path):
    """``manage.py enroll NAME --broker URL``: the node's ACL line and broker URL, 0600, one password in both."""
    import stat
    import urllib.parse

    from django.core.management import CommandError, call_command

    out = tmp_path / "enrolled"
    call_command("enroll", "gpu-7", "--out", str(out), "--broker", "redis://broker.example:6379/0")
    line, url = (out / "gpu-7.acl").read_text().strip(), (out / "gpu-7.broker").read_text().strip()
    for name in ("gpu-7.acl", "gpu-7.broker", "gpu-7.key"):
        assert stat.S_IMODE((out / name).stat().st_mode) == 0o600, name
    parts = urllib.parse.urlsplit(url)
    assert (parts.username, parts.hostname, parts.port, parts.path) == ("agent-gpu-7", "broker.example", 6379, "/0")
    assert line == "user " + acl.agent_rule("gpu-7", parts.password) and len(parts.password) >= 40
    server = RedisServer(tmp_path / "redis", users=("default off", line.removeprefix("user ")))
    server.start()
    try:
        client = redis.Redis.from_url(server.url_for("agent-gpu-7", parts.password))
        assert client.lpush("server.ingest.gpu-7", b"{}") == 1
        for other in ("server", "server.ingest", "server.ingest.gpu-8"):
            with pytest.raises(redis.exceptions.NoPermissionError):
                client.lpush(other, b"{}")
        client.close()
    finally:
        server.stop()
    with pytest.raises(CommandError, match="without credentials"):
        call_command("enroll", "gpu-8", "--out", str(out), "--broker", "redis://u:p@broker.example:6379/0")
