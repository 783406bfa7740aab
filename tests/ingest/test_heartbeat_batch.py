"""A consumer's batch of heartbeats: the known nodes refreshed by one statement, a replay dropped, a bad
heartbeat only its own loss (checked and applied as the ingest consumer does, on the session's Redis)."""

from __future__ import annotations

import time

import pytest
import redis
from django.db import DataError

from agents import contract, signing
from cluster_health import bulk
from cluster_health.ingest import consumer
from cluster_health.models import AgentKey, Node, RejectedMessage

pytestmark = pytest.mark.django_db

PARKED = "test.heartbeats"  # a queue nobody consumes: the messages are read back as Celery stored them


def beat(name: str, address: str = "10.0.0.1") -> dict:
    return {"v": 1, "node": name, "address": address, "facts": {}, "agent_version": "t", "sent_at": time.time()}


@pytest.fixture
def keys():
    made = {name: signing.new_key(name) for name in [f"hb{i}" for i in range(40)]}
    AgentKey.objects.bulk_create([AgentKey.sealed(key) for key in made.values()])
    return made


@pytest.fixture
def stored(settings):
    """Send signed heartbeats as agents do; returns their messages as the consumer takes them (oldest first)."""
    from cluster_health.celery import app

    client = redis.Redis.from_url(settings.REDIS_URL)

    def store(kwargs_list: list[dict]) -> list[bytes]:
        for kwargs in kwargs_list:
            app.send_task(contract.TASK_HEARTBEAT, kwargs=kwargs, queue=PARKED)
        raw = client.lrange(PARKED, 0, -1)[::-1]
        client.delete(PARKED)
        return raw

    yield store
    client.delete(PARKED)
    client.close()


def signed(body: dict, key) -> dict:
    return {"heartbeat": body, "auth": signing.sign(body, key, "heartbeat")}


def test_a_batch_refreshes_known_nodes_in_one_statement_registers_new_ones_and_drops_replays(
    keys, stored, django_assert_max_num_queries
):
    known = [f"hb{i}" for i in range(30)]
    Node.objects.bulk_create([Node(name=n, address="10.9.9.9") for n in known])
    replayed = signed(beat("hb0", "10.0.0.100"), keys["hb0"])
    messages = [signed(beat(n, f"10.0.1.{i}"), keys[n]) for i, n in enumerate(known)]
    messages += [
        signed(beat("hb31", "10.0.2.1"), keys["hb31"]),  # a node's first heartbeat
        signed(beat("hb1", "10.0.3.1"), keys["hb1"]),  # the same node again, later in the batch: this one counts
        signed({**beat("hb32"), "address": "not an address"}, keys["hb32"]),  # refused by the contract
        replayed,
        replayed,  # the same message twice in one batch: applied once
    ]
    raw = stored(messages)
    rejects = RejectedMessage.objects.count()

    halves, beats = consumer.checked(raw)
    assert halves == [] and len(beats) == len(messages) - 1
    # Every known node's row in one UPDATE, the new node and the reject on their own: a dozen statements
    # where one heartbeat at a time took three each (a savepoint, the UPDATE, its release), about a hundred.
    with django_assert_max_num_queries(15):
        consumer.apply_heartbeats(beats)

    rows = dict(Node.objects.values_list("name", "address"))
    assert rows["hb1"] == "10.0.3.1" and rows["hb31"] == "10.0.2.1" and rows["hb0"] == "10.0.0.100"
    assert all(rows[n] == f"10.0.1.{i}" for i, n in enumerate(known) if n not in ("hb0", "hb1"))
    assert "hb32" not in rows
    assert Node.objects.filter(name__in=[*known, "hb31"], last_heartbeat__isnull=False).count() == 31
    assert RejectedMessage.objects.count() == rejects + 1
    # Applied, so their nonces are used: the same messages delivered again change nothing and are no rejects.
    assert consumer.checked(stored([replayed, messages[5]])) == ([], [])
    assert RejectedMessage.objects.count() == rejects + 1


def test_a_batch_the_database_refuses_is_applied_one_heartbeat_at_a_time(keys, stored, monkeypatch):
    names = [f"hb{i}" for i in range(5)]
    Node.objects.bulk_create([Node(name=n, address="10.9.9.9") for n in names])
    _, beats = consumer.checked(stored([signed(beat(n, "10.0.4.4"), keys[n]) for n in names]))

    def refused(*args, **kwargs):
        raise DataError("value too long for type character varying(253)")

    monkeypatch.setattr(bulk, "conditional_update", refused)
    consumer.apply_heartbeats(beats)
    assert set(Node.objects.filter(address="10.0.4.4").values_list("name", flat=True)) == set(names)


def test_each_heartbeat_sets_its_nodes_clock_offset_and_a_queues_wait_barely_moves_it(driver):
    """A node 42 s ahead is seen 42 s ahead; a heartbeat that waited 8 s in a queue does not make it look
    34 s ahead; a node with no time in its heartbeats has none; the sweep names the odd clock."""
    from cluster_health.ingest import heartbeats

    now = time.time()
    heartbeats.record_heartbeats(
        [{**beat("skew0"), "sent_at": now + 42.0}, {**beat("skew1"), "sent_at": now}, beat("skew2")]
    )
    assert 41.5 < Node.objects.get(name="skew0").clock_offset_s <= 42.0
    heartbeats.record_heartbeats([{**beat("skew0"), "sent_at": time.time() + 42.0 - 8.0}])  # waited 8 s
    assert Node.objects.get(name="skew0").clock_offset_s > 41.0
    heartbeats.record_heartbeat({**beat("skew1"), "sent_at": time.time() - 0.2})
    assert -1.0 < Node.objects.get(name="skew1").clock_offset_s <= 0.0
    heartbeats.record_heartbeat({**beat("skew2"), "sent_at": None})
    assert Node.objects.get(name="skew2").clock_offset_s is not None  # the one reading it had is kept
    sweep = driver.sweep(kind="connectivity", nodes=["skew0", "skew1", "skew2"])
    driver.answer_all()
    found = {f.code: f for f in sweep.findings.all()}
    assert found["clock_skew"].subject == "skew0" and "42 s ahead of the server's" in found["clock_skew"].text
