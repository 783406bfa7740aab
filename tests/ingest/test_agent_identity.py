"""Agent identity: enrolment, signed heartbeats and results, and everything a forger on Redis could try."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import time

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from agents import signing
from cluster_health import tasks
from cluster_health.ingest.buffer import BUFFERED
from cluster_health.models import AgentKey, Node, PairProbe, RejectedMessage
from devtools.devstack import run_to_end
from devtools.services import python_env
from devtools.sweep_driver import heartbeat as unsigned_heartbeat
from devtools.sweep_driver import result_for

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("memory_channel_layer")]


def beat(name: str, address: str = "10.0.0.1", **extra) -> dict:
    return {
        "v": 1,
        "node": name,
        "address": address,
        "facts": {},
        "agent_version": "t",
        "sent_at": time.time(),
        **extra,
    }


@pytest.fixture
def keys(tmp_path):
    """n0 and n1 enrolled through the command; their key files read back as an agent reads them."""
    call_command("enroll", "n0", "n1", "--out", str(tmp_path / "keys"))
    return {n: signing.load_key_file(tmp_path / "keys" / f"{n}.key", n) for n in ("n0", "n1")}


def test_enroll_writes_owner_only_key_files_and_keeps_the_secret_sealed(keys, tmp_path):
    path = tmp_path / "keys" / "n0.key"
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    row = AgentKey.objects.get(node_name="n0")
    assert row.key_id == keys["n0"].key_id and keys["n0"].secret not in row.secret_sealed
    assert row.secret() == keys["n0"].secret.encode()


def test_enroll_refuses_a_second_key_unless_rotating(keys, tmp_path):
    with pytest.raises(CommandError, match="rotate"):
        call_command("enroll", "n0", "--out", str(tmp_path / "again"))
    call_command("enroll", "n0", "--rotate", "--out", str(tmp_path / "again"))
    new = signing.load_key_file(tmp_path / "again" / "n0.key", "n0")
    assert tasks.heartbeat(beat("n0"), signing.sign(beat("n0"), keys["n0"], "heartbeat")) == "rejected"
    body = beat("n0")
    assert tasks.heartbeat(body, signing.sign(body, new, "heartbeat")) == "applied"


def test_a_signed_heartbeat_is_applied(keys):
    body = beat("n0")
    assert tasks.heartbeat(body, signing.sign(body, keys["n0"], "heartbeat")) == "applied"
    assert Node.objects.get(name="n0").address == "10.0.0.1"


def forgeries(keys):
    """(why, body, auth): every way a message on Redis may claim to be n0's heartbeat without being it."""
    body = beat("n0", address="6.6.6.6")
    stranger = signing.new_key("n0")
    yield "unsigned", body, None
    yield "signed by another node's key", body, signing.sign(body, keys["n1"], "heartbeat")
    yield "n1 speaking for n0", body, {**signing.sign(beat("n1"), keys["n1"], "heartbeat")}
    yield "a key the server never enrolled", body, signing.sign(body, stranger, "heartbeat")
    yield "stale", body, signing.sign(body, keys["n0"], "heartbeat", now=time.time() - 3600)
    yield "from the future", body, signing.sign(body, keys["n0"], "heartbeat", now=time.time() + 3600)
    yield "a result's signature", body, signing.sign(body, keys["n0"], "result")
    auth = signing.sign(beat("n0"), keys["n0"], "heartbeat")
    yield "a body changed after signing", body, auth
    yield "an envelope that is not an object", body, "sig"
    yield "a malformed envelope", body, {**signing.sign(body, keys["n0"], "heartbeat"), "ts": float("nan")}
    yield "a NaN added to the envelope", body, {**signing.sign(body, keys["n0"], "heartbeat"), "x": float("nan")}


def test_every_forgery_is_rejected_recorded_and_changes_nothing(keys):
    unsigned_heartbeat("n0", address="10.0.0.1")  # registered before: the forger wants to move it
    for why, body, auth in forgeries(keys):
        assert tasks.heartbeat(body, auth) == "rejected", why
    assert Node.objects.get(name="n0").address == "10.0.0.1"
    errors = list(RejectedMessage.objects.values_list("error", flat=True))
    assert len(errors) == 11 and all(e.startswith("signature:") for e in errors)
    assert any("unsigned" in e for e in errors) and any("stale" in e for e in errors)


def test_a_replayed_heartbeat_changes_nothing(keys):
    old = beat("n0", address="10.0.0.1")
    old_auth = signing.sign(old, keys["n0"], "heartbeat")
    assert tasks.heartbeat(old, old_auth) == "applied"
    new = beat("n0", address="10.0.0.2")
    assert tasks.heartbeat(new, signing.sign(new, keys["n0"], "heartbeat")) == "applied"
    # Replayed to move the node back (or redelivered by Redis): a duplicate, not applied.
    assert tasks.heartbeat(old, old_auth) == "duplicate"
    assert Node.objects.get(name="n0").address == "10.0.0.2"


def test_revoking_a_key_takes_effect_at_once(keys):
    body = beat("n0")
    assert tasks.heartbeat(body, signing.sign(body, keys["n0"], "heartbeat")) == "applied"
    AgentKey.objects.get(node_name="n0").revoke()
    assert tasks.heartbeat(body, signing.sign(body, keys["n0"], "heartbeat")) == "rejected"
    assert "revoked" in RejectedMessage.objects.get().error


def test_results_are_signed_and_bound_to_their_node(keys, driver):
    for name in ("n0", "n1"):
        b = beat(name)
        tasks.heartbeat(b, signing.sign(b, keys[name], "heartbeat"))
    sweep = driver.sweep(kind="pairs", pairs=[["n0", "n1"]], sizes=[1024])
    a, b = sorted(driver.take(), key=lambda c: c["rank"])
    forged = result_for(b, status="failed", reason="refused")
    assert tasks.result(forged, signing.sign(forged, keys["n0"], "result")) == "rejected"  # n0 speaking for n1
    assert tasks.result(forged) == "rejected"
    ra, rb = result_for(a), result_for(b)
    # Accepted halves go to the ingest buffer, and the task's own drainer applies them at once.
    assert driver.run(tasks.result, ra, signing.sign(ra, keys["n0"], "result")) == BUFFERED
    assert PairProbe.objects.get(sweep=sweep).half_a is not None
    signed_b = signing.sign(rb, keys["n1"], "result")
    assert driver.run(tasks.result, rb, signed_b) == BUFFERED
    closed = PairProbe.objects.get(sweep=sweep)
    assert closed.status == "ok"
    # Replayed (or redelivered by Redis after a worker died): a duplicate that changes nothing.
    assert driver.run(tasks.result, rb, signed_b) == BUFFERED
    again = PairProbe.objects.get(sweep=sweep)
    assert (again.status, again.finished, again.half_b) == (closed.status, closed.finished, closed.half_b)


def test_commands_go_out_signed_with_the_target_node_key(keys, driver):
    from cluster_health.queues import dispatch

    for name in ("n0", "n1"):
        unsigned_heartbeat(name)
    driver.sweep(kind="pairs", pairs=[["n0", "n1"]], sizes=[1024])
    with dispatch.capture() as sent:
        dispatch.send_commands(driver.take())
    assert len(sent) == 2
    for _task, _queue, kwargs, _expires in sent:
        node = kwargs["command"]["node"]
        signing.verify(kwargs["command"], kwargs["auth"], "command", keys[node].secret_for)
        with pytest.raises(signing.SignatureError):
            other = keys["n1" if node == "n0" else "n0"]
            signing.verify(kwargs["command"], kwargs["auth"], "command", other.secret_for)


def test_unsigned_agents_only_with_the_development_setting(settings):
    assert tasks.heartbeat(beat("n0")) == "rejected"
    settings.ALLOW_UNSIGNED_AGENTS = True
    assert tasks.heartbeat(beat("n0")) == "applied"
    assert tasks.heartbeat(beat("n0"), signing.sign(beat("n0"), signing.new_key("n0"), "heartbeat")) == "rejected"


def test_a_huge_signed_message_is_refused_before_it_is_stored(keys):
    body = beat("n0", facts={"blob": "x" * (5 * 1024 * 1024)})
    assert tasks.heartbeat(body, signing.sign(body, keys["n0"], "heartbeat")) == "rejected"
    rejected = RejectedMessage.objects.get()
    assert "size" in rejected.error and len(str(rejected.payload)) < 20_000
    assert not Node.objects.filter(name="n0").exists()


def agent_run(*args, **env) -> subprocess.CompletedProcess:
    base = {k: v for k, v in python_env(**env).items() if k != "CLUSTER_HEALTH_AGENT_KEY_FILE"}
    return run_to_end(
        [sys.executable, "-m", "agents", "run", "--name", "n0", "--broker", "redis://127.0.0.1:1/0", *args], env=base
    )


def test_the_agent_refuses_to_start_without_its_own_private_key(tmp_path):
    assert "--key-file" in agent_run(CLUSTER_HEALTH_ALLOW_UNSIGNED_AGENTS="0").stderr
    signing.write_key_file(tmp_path / "n1.key", signing.new_key("n1"))
    assert "not n0" in agent_run("--key-file", str(tmp_path / "n1.key")).stderr
    signing.write_key_file(tmp_path / "n0.key", signing.new_key("n0"))
    os.chmod(tmp_path / "n0.key", 0o644)
    assert "readable by others" in agent_run("--key-file", str(tmp_path / "n0.key")).stderr
