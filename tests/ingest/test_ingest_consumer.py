"""The ingest consumer: halves taken off queue server.ingest in batches by the real stack's worker."""

from __future__ import annotations

import time
from contextlib import contextmanager

import pytest
import redis

from agents import contract, signing
from cluster_health import vocabulary
from cluster_health.ingest import consumer
from cluster_health.models import PairProbe, RejectedMessage
from cluster_health.queues import keys, messages
from devtools import services
from devtools.sweep_driver import result_for
from tests.support.sweep_setup import open_pairs, wait_closed

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

RECLAIM_WAIT_S = consumer.RECLAIM_EVERY_S + 30  # a live consumer's next look for orphans, with room


def signed_task(result: dict, key) -> dict:
    return {"result": result, "auth": signing.sign(result, key, "result")}


def send(kwargs: dict, task: str = contract.TASK_RESULT, queue: str = contract.INGEST_QUEUE) -> None:
    from cluster_health.celery import app

    app.send_task(task, kwargs=kwargs, queue=queue)


@contextmanager
def consumer_keys(settings, name: str):
    """A Redis client; a consumer ``name``'s taken list, lease and registration are removed afterwards."""
    client = redis.Redis.from_url(settings.REDIS_URL)
    try:
        yield client
    finally:
        client.delete("test.parked", keys.taken_key(name), keys.lease_key(name))
        client.srem(keys.CONSUMERS, name)
        client.close()


@contextmanager
def held_batch(stack, driver, settings, name: str, tag: str, count: int):
    """A pairs sweep of ``count`` open pairs (open_pairs) whose halves are the batch consumer ``name`` held
    when it died: as agents sent them, in its taken list. Yields (sweep id, commands, Redis client), as
    consumer_keys cleans up."""
    sweep_id, cmds = open_pairs(stack, driver, tag, count)
    with consumer_keys(settings, name) as client:
        for cmd in cmds:  # sent to a queue nobody consumes, then moved as the consumer's take moves them
            send(signed_task(result_for(cmd), stack.keys[cmd["node"]]), queue="test.parked")
        while client.rpoplpush("test.parked", keys.taken_key(name)):
            pass
        assert client.llen(keys.taken_key(name)) == len(cmds)
        yield sweep_id, cmds, client


def test_forged_and_unreadable_messages_are_kept_as_rejected_and_the_rest_applied(stack, driver, settings):
    sweep_id, cmds = open_pairs(stack, driver, "mix", 2)
    before = RejectedMessage.objects.count()
    client = redis.Redis.from_url(settings.REDIS_URL)
    try:
        first = result_for(cmds[0])
        # A half signed by a key the server never enrolled for its node.
        send(signed_task(first, signing.new_key(first["node"])))
        client.lpush(contract.INGEST_QUEUE, b"\x00not a message")
        client.lpush(contract.INGEST_QUEUE, b"{" * (messages.MAX_MESSAGE_BYTES + 1))  # refused unread
        send({"sweep_id": sweep_id}, task=vocabulary.TASK_START_SWEEP)  # not what this queue carries
        for cmd in cmds:
            send(signed_task(result_for(cmd), stack.keys[cmd["node"]]))
        wait_closed(sweep_id, 2, timeout=30)
        services.wait_until(lambda: RejectedMessage.objects.count() >= before + 4, 30, message="four rejected")
    finally:
        client.close()
    reasons = sorted(RejectedMessage.objects.order_by("pk")[before:].values_list("error", flat=True))
    assert len(reasons) == 4, reasons
    assert any("signature" in r for r in reasons), reasons
    assert any("not a task message" in r for r in reasons), reasons
    assert any("more than the" in r for r in reasons), reasons
    assert any(f"carries {', '.join(consumer.CARRIED)} messages only" in r for r in reasons), reasons
    assert all(p.half_a and p.half_b for p in PairProbe.objects.filter(sweep_id=sweep_id))


def test_a_heartbeat_is_applied_and_a_replayed_or_expired_one_is_not(stack, settings):
    from datetime import timedelta

    from django.utils import timezone

    from cluster_health.celery import app
    from cluster_health.models import Node

    keys = {name: stack.keys.setdefault(name, signing.new_key(name)) for name in ("hb-c1", "hb-c2")}
    stack.restore_keys()

    def beat(node: str, address: str, **options) -> dict:
        body = {"v": 1, "node": node, "address": address, "facts": {}, "agent_version": "t", "sent_at": time.time()}
        kwargs = {"heartbeat": body, "auth": signing.sign(body, keys[node], "heartbeat")}
        app.send_task(contract.TASK_HEARTBEAT, kwargs=kwargs, queue=contract.INGEST_QUEUE, **options)
        return kwargs

    first = beat("hb-c1", "10.9.0.1")
    services.wait_until(lambda: Node.objects.filter(name="hb-c1").exists(), 30, message="node registered")
    assert Node.objects.get(name="hb-c1").address == "10.9.0.1"
    Node.objects.filter(name="hb-c1").update(address="10.9.9.9")
    before = RejectedMessage.objects.count()
    send(first, task=contract.TASK_HEARTBEAT)  # the same message again: its nonce is used
    beat("hb-c1", "10.9.0.2", expires=timezone.now() - timedelta(seconds=1))  # queued past its expiry
    beat("hb-c2", "10.9.0.3")  # taken after both, in order
    services.wait_until(lambda: Node.objects.filter(name="hb-c2").exists(), 30, message="the later heartbeat applied")
    assert Node.objects.get(name="hb-c1").address == "10.9.9.9"
    assert RejectedMessage.objects.count() == before  # a replay and an expired heartbeat are no rejects


def test_a_dead_consumers_batch_goes_back_on_the_queue_and_is_applied_once(stack, driver, settings):
    """A consumer that died holding a batch (its lease lapsed): a live consumer puts the batch back."""
    gone = "gone@elsewhere"
    with held_batch(stack, driver, settings, gone, "orphan", 20) as (sweep_id, _cmds, client):
        client.sadd(keys.CONSUMERS, gone)  # registered, with no lease: dead
        wait_closed(sweep_id, 20, timeout=RECLAIM_WAIT_S)
        assert not client.exists(keys.taken_key(gone))
        assert gone.encode() not in client.smembers(keys.CONSUMERS)
    assert all(p.half_a and p.half_b for p in PairProbe.objects.filter(sweep_id=sweep_id))


def test_a_consumer_back_from_a_crash_applies_the_batch_it_held_first(stack, driver, settings):
    """The same consumer (same worker name) restarted: its taken list is the first batch it applies."""
    name = "crashed@test"
    with held_batch(stack, driver, settings, name, "again", 3) as (sweep_id, cmds, client):
        again = consumer.Consumer(name, client)
        # Its own batch is taken whole, before anything queued: the stack's agents' heartbeats share
        # the queue, so one sent meanwhile may join the batch after the held halves, never instead.
        taken = again.step(block_s=0)
        assert taken >= len(cmds), taken
        assert not client.exists(keys.taken_key(name))  # every held message was checked and let go
        wait_closed(sweep_id, 3, timeout=30)


def test_the_backlog_counts_halves_on_the_ingest_queue_and_in_a_consumers_batch(stack, settings):
    from cluster_health.queues import backlog

    name = "held@test"
    key = stack.keys.setdefault("bk1", signing.new_key("bk1"))  # enrolled: the backlog believes signed halves only
    stack.restore_keys()
    half = {"v": 1, "kind": "pair", "probe_id": 987654, "node": "bk1", "rank": 0}
    with consumer_keys(settings, name) as client:
        send(signed_task(half, key), queue="test.parked")
        client.rpoplpush("test.parked", keys.taken_key(name))
        client.set(keys.lease_key(name), b"x", ex=60)  # alive: not reclaimed meanwhile
        client.sadd(keys.CONSUMERS, name)
        seen = backlog.server_backlog()
    assert seen is not None and ("pair", 987654) in seen.probes and "bk1" in seen.nodes


def test_a_queue_no_agent_has_declared_yet_still_receives_halves(stack):
    """The consumer binds server.ingest itself: the Redis transport drops a message sent to an unbound queue."""
    client = redis.Redis.from_url(stack.redis.url)
    try:
        assert client.smembers(f"_kombu.binding.{contract.INGEST_QUEUE}"), "the consumer bound its queue"
    finally:
        client.close()


def take(client, taken: str, old: str, lists: list[str], size: int, per: int = 2, cap: int = 1000) -> list:
    """consumer.TAKE_SCRIPT on lists of the test's own (prefix "test.take.", counted in test.take.dropped)."""
    script_keys = [taken, "test.take.dropped", old, *lists]
    return client.eval(consumer.TAKE_SCRIPT, len(script_keys), *script_keys, size, per, cap, len("test.take."))


def test_a_batch_is_what_the_last_life_held_first_then_the_oldest_queued(stack):
    """The take's order, on lists of its own: a held batch is never passed over for newer messages, and each
    list gives its oldest first."""
    client = redis.Redis.from_url(stack.redis.url)
    old, taken, node = "test.take.old", "test.take.taken", "test.take.n1"
    try:
        client.rpush(taken, b"held-1", b"held-2")
        client.lpush(node, b"q-1", b"q-2", b"q-3")  # Celery pushes on the left: q-1 is the oldest
        batch, dropped, _ = take(client, taken, old, [node], 4)
        assert batch == [b"held-1", b"held-2", b"q-1", b"q-2"] and dropped == []
        assert client.lrange(node, 0, -1) == [b"q-3"]  # the newest stays queued
        assert client.lrange(taken, 0, -1) == [b"held-1", b"held-2", b"q-1", b"q-2"]
        # Taken again (its consumer died before letting go): the held list whole, however long, and nothing more.
        assert take(client, taken, old, [node], 2)[0] == [b"held-1", b"held-2", b"q-1", b"q-2"]
        assert client.lrange(node, 0, -1) == [b"q-3"]
    finally:
        client.delete(old, taken, node, "test.take.dropped")


def test_a_batch_takes_a_share_of_each_nodes_list_and_trims_each_to_its_cap(stack):
    """Fair and bounded: a node that floods its list gets ``per`` messages of a batch like any other, the next
    batch starts past the last list served, and a list over the cap loses its newest, counted per node."""
    client = redis.Redis.from_url(stack.redis.url)
    old, taken = "test.take.old", "test.take.taken"
    flood, quiet, late = "test.take.flood", "test.take.quiet", "test.take.late"
    try:
        client.lpush(flood, *[f"f-{i}".encode() for i in range(50)])  # f-0 the oldest
        client.lpush(quiet, b"q-0")
        client.lpush(late, b"l-0", b"l-1")
        client.lpush(old, b"o-0")  # an agent of the previous version
        batch, dropped, served = take(client, taken, old, [flood, quiet, late], 4, per=2, cap=10)
        assert dropped == [b"flood", 40] and client.hget("test.take.dropped", "flood") == b"40"
        assert batch == [b"o-0", b"f-0", b"f-1", b"q-0"] and served == 2  # full after the second list
        assert client.lrange(flood, 0, -1) == [f"f-{i}".encode() for i in range(9, 1, -1)]  # the oldest kept
        client.delete(taken)
        batch, dropped, served = take(client, taken, old, [late, flood, quiet], 5, per=2, cap=10)  # from the third
        assert batch == [b"l-0", b"l-1", b"f-2", b"f-3"] and dropped == [] and served == 0  # room left: all served
    finally:
        client.delete(old, taken, flood, quiet, late, "test.take.dropped")


def test_lone_surrogates_cost_their_own_message_and_never_stall_the_consumer(stack, driver, settings):
    """A lone surrogate has no UTF-8: a node name, hint or fact carrying one used to make the reject
    (or the write) raise, and the consumer took the same batch again for ever."""
    sweep_id, cmds = open_pairs(stack, driver, "sur", 2)
    before = RejectedMessage.objects.count()
    first, second = (result_for(cmd) for cmd in cmds[:2])
    forged = {"node": "n\ud800", "kid": "k\udcff", "ts": 0, "nonce": "\ud83d", "sig": "x"}
    send({"result": first, "auth": forged})  # unsigned, its envelope not even text
    send({"heartbeat": {"node": "hb\udfff"}, "auth": {**forged, "node": "hb\udfff"}}, task=contract.TASK_HEARTBEAT)
    # A node that signs a half whose failure text holds one (a broken decoder on the node).
    failed = result_for(cmds[2], status="failed", reason="transport", hint="peer said \udcfe\udcff")
    send(signed_task(failed, stack.keys[cmds[2]["node"]]))
    for cmd in [cmds[0], cmds[1], cmds[3]]:
        send(signed_task(result_for(cmd), stack.keys[cmd["node"]]))
    planned = PairProbe.objects.filter(pk__in={c["probe_id"] for c in cmds})  # not the confirmation pass's
    services.wait_until(
        lambda: not planned.filter(status__in=("pending", "running")).exists(), 30, message="both pairs closed"
    )
    services.wait_until(lambda: RejectedMessage.objects.count() >= before + 2, 30, message="two rejected")
    rejected = list(RejectedMessage.objects.order_by("pk")[before:])
    assert len(rejected) == 2, [(r.node, r.error) for r in rejected]
    assert {r.node for r in rejected} == {"n\\ud800", "hb\\udfff"}
    statuses = dict(planned.values_list("id", "status"))
    assert sorted(statuses.values()) == ["failed", "ok"], statuses
    hint = planned.get(status="failed").hint
    assert "\ufffd\ufffd" in hint and hint.encode("utf-8"), hint
