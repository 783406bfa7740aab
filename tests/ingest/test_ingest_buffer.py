"""The ingest buffer: halves sent as messages are applied in batches, once, and stay visible until applied."""

import json

import pytest
import redis

from cluster_health import ingest
from cluster_health.ingest import buffer
from cluster_health.models import PairProbe, RejectedMessage
from cluster_health.queues import backlog, keys
from devtools.sweep_driver import result_for
from tests.support.sweep_setup import connectivity_sweep

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("memory_channel_layer")]


@pytest.fixture
def broker(settings):
    client = redis.Redis.from_url(settings.REDIS_URL)
    client.delete(*keys.buffer_keys(), *(keys.lock_key(s) for s in range(keys.SHARDS)))
    yield client
    client.delete(*keys.buffer_keys(), *(keys.lock_key(s) for s in range(keys.SHARDS)))
    client.close()


def sealed(half: dict) -> str:
    """A half as the server's consumer leaves it in the buffer (checked, then sealed)."""
    from django.conf import settings

    return keys.sealed(json.dumps(half), keys.seal_key(settings.SECRET_KEY))


@pytest.fixture
def two_pairs(driver):
    return connectivity_sweep(driver)


def test_it_applies_a_half_at_once_when_no_one_else_drains(driver, broker, two_pairs):
    sweep, cmds = two_pairs
    outcomes = [driver.run(ingest.buffer_result, result_for(c, busbw=3.0)) for c in cmds]
    assert outcomes == ["buffered"] * 4
    assert {p.status for p in PairProbe.objects.filter(sweep=sweep, round=1)} == {"ok"}
    assert not any(broker.llen(key) for key in keys.buffer_keys())


def test_it_applies_a_dead_drainers_batch_once(driver, broker, two_pairs):
    sweep, cmds = two_pairs
    halves = [result_for(c, busbw=3.0) for c in cmds]
    # A drainer died after moving these to processing (its lock expired); one message was
    # also delivered again, so the same half waits in pending too.
    for half in halves:
        broker.rpush(keys.processing_key(keys.shard_of(half)), sealed(half))
    broker.rpush(keys.pending_key(keys.shard_of(halves[0])), sealed({**halves[0], "busbw_gbps": 99.0}))
    assert driver.run(ingest.drain_all) == 5
    probes = PairProbe.objects.filter(sweep=sweep, round=1)
    assert {p.status for p in probes} == {"ok"} and {p.busbw_gbps for p in probes} == {3.0}
    assert not RejectedMessage.objects.exists()
    assert not any(broker.llen(key) for key in keys.buffer_keys())
    assert driver.run(ingest.drain_all) == 0


def test_it_leaves_a_held_shard_to_its_drainer_and_the_backlog_sees_the_half(driver, broker, two_pairs):
    sweep, cmds = two_pairs
    half = result_for(cmds[0])
    shard = keys.shard_of(half)
    broker.set(keys.lock_key(shard), "another drainer", px=60_000)
    driver.run(ingest.buffer_result, half)
    assert PairProbe.objects.get(pk=half["probe_id"]).half_a is None
    waiting = backlog.server_backlog()
    assert waiting.complete and ("pair", half["probe_id"]) in waiting.probes and half["node"] in waiting.nodes
    broker.delete(keys.lock_key(shard))
    assert driver.run(ingest.drain_all) == 1
    assert PairProbe.objects.get(pk=half["probe_id"]).half_a is not None
    assert ("pair", half["probe_id"]) not in backlog.server_backlog().probes


def test_the_backlog_is_incomplete_when_the_buffer_is_too_long_to_read(broker, monkeypatch):
    monkeypatch.setattr(backlog, "BUFFER_PEEK_MAX", 2)
    for probe_id in (8, 16, 24):
        broker.rpush(keys.pending_key(0), sealed({"node": "n0", "kind": "pair", "probe_id": probe_id}))
    waiting = backlog.server_backlog()
    assert not waiting.complete and waiting.messages == 3


def test_a_half_planted_in_the_buffer_without_the_servers_seal_is_never_applied(driver, broker, two_pairs):
    """Anyone who can make a server worker push onto a list (kombu restores an ``unacked`` entry to the
    list its routing key names) could plant a half there: the drainer applies only what a server sealed."""
    sweep, cmds = two_pairs
    forged = result_for(cmds[0], status="failed", stage="connect", reason="refused", hint="planted")
    broker.rpush(keys.pending_key(keys.shard_of(forged)), json.dumps(forged))
    resealed = keys.sealed(json.dumps(forged), keys.seal_key("not the server's secret"))
    broker.rpush(keys.pending_key(keys.shard_of(forged)), resealed)
    assert driver.run(ingest.drain_all) == 1  # the batch's one step; nothing of it applied
    probe = PairProbe.objects.get(pk=forged["probe_id"])
    assert (probe.status, probe.half_a, probe.half_b) == ("running", None, None)
    errors = list(RejectedMessage.objects.values_list("error", flat=True))
    assert errors == ["ingest buffer: an entry without the server's seal"] * 2
    assert not any(broker.llen(key) for key in keys.buffer_keys())
    assert forged["node"] not in backlog.server_backlog().nodes
    for cmd in cmds:  # the real halves still close the sweep's pairs
        driver.run(ingest.buffer_result, result_for(cmd))
    assert {p.status for p in PairProbe.objects.filter(sweep=sweep, round=1)} == {"ok"}


HELD = keys.taken_key("buffer-test")  # a consumer's taken list


def test_a_consumers_batch_is_applied_past_the_buffer_and_let_go_after_the_commit(driver, broker, two_pairs):
    sweep, cmds = two_pairs
    halves = [result_for(c, busbw=3.0) for c in cmds]
    broker.rpush(HELD, *(json.dumps(h) for h in halves))
    try:
        assert driver.run(buffer.apply_held, broker, halves, HELD) is True
        assert {p.status for p in PairProbe.objects.filter(sweep=sweep, round=1)} == {"ok"}
        assert not broker.exists(HELD)  # let go only once applied
        assert not any(broker.llen(key) for key in keys.buffer_keys())  # nothing went through the buffer
        assert not any(broker.exists(keys.lock_key(s)) for s in range(keys.SHARDS))  # every shard let go
    finally:
        broker.delete(HELD)


def test_a_consumers_batch_waits_for_a_shard_another_drainer_holds(driver, broker, two_pairs):
    sweep, cmds = two_pairs
    halves = [result_for(c) for c in cmds]
    held = keys.shard_of(halves[-1])
    broker.set(keys.lock_key(held), "another drainer", px=60_000)
    broker.rpush(HELD, *(json.dumps(h) for h in halves))
    try:
        assert driver.run(buffer.apply_held, broker, halves, HELD) is False
        assert not PairProbe.objects.filter(sweep=sweep, round=1).exclude(half_a=None).exists()  # nothing applied
        assert broker.llen(HELD) == 4  # still the consumer's, for the buffer
        assert broker.get(keys.lock_key(held)) == b"another drainer"
        assert [s for s in range(keys.SHARDS) if broker.exists(keys.lock_key(s))] == [held]  # none kept
    finally:
        broker.delete(HELD)


def test_a_consumer_that_fails_mid_batch_keeps_it_and_applies_it_once_later(driver, broker, two_pairs, monkeypatch):
    sweep, cmds = two_pairs
    halves = [result_for(c, busbw=3.0) for c in cmds]
    broker.rpush(HELD, *(json.dumps(h) for h in halves))

    def database_gone(payloads):
        from django.db import OperationalError

        raise OperationalError("server closed the connection unexpectedly")

    try:
        with monkeypatch.context() as patched:
            patched.setattr(buffer.results, "ingest_results", database_gone)
            with pytest.raises(Exception, match="closed the connection"):
                driver.run(buffer.apply_held, broker, halves, HELD)
        assert broker.llen(HELD) == 4  # kept for the consumer's next try
        assert not any(broker.exists(keys.lock_key(s)) for s in range(keys.SHARDS))
        assert driver.run(buffer.apply_held, broker, halves + halves[:1], HELD) is True  # again, one half twice
        probes = PairProbe.objects.filter(sweep=sweep, round=1)
        assert {p.status for p in probes} == {"ok"} and {p.busbw_gbps for p in probes} == {3.0}
        assert not RejectedMessage.objects.exists() and not broker.exists(HELD)
    finally:
        broker.delete(HELD)
