"""The server's task messages are the text Celery's ``send_task`` writes, and arrive where Celery's would."""

from __future__ import annotations

import base64
import json
from datetime import datetime

import pytest
import redis

from agents import contract
from cluster_health.queues import dispatch, messages
from devtools.celery_send import celery_send

# Fields that differ between any two messages: ids Celery draws per message (or per process, the reply
# queue) and the time a message expires at. Every other field must be the same, value for value.
PER_MESSAGE = {"id", "root_id", "correlation_id", "delivery_tag", "reply_to", "expires"}
COMMAND = {"command": {"node": "w0", "probe_id": 7, "rank": 0, "sizes": [1024]}, "auth": {"sig": "ab" * 32}}


@pytest.fixture
def client(settings):
    client = redis.Redis.from_url(settings.REDIS_URL)
    client.delete("test.wire.celery", "test.wire.ours")
    yield client
    client.delete("test.wire.celery", "test.wire.ours")
    client.close()


def celery_writes(client, task: str, kwargs: dict, expires_s: float | None) -> dict:
    """What ``send_task`` pushes for a message, sent as the server sent its messages through Celery."""
    celery_send([(task, "test.wire.celery", kwargs, expires_s)])
    return json.loads(client.rpop("test.wire.celery"))


def ours(client, task: str, kwargs: dict, expires_s: float | None) -> dict:
    dispatch._redis_send([(task, "test.wire.ours", kwargs, expires_s)])
    return json.loads(client.rpop("test.wire.ours"))


def fields(message: dict) -> dict:
    """Every field of a stored message, flat (headers and properties by name), routing key aside; the body as
    the JSON value it encodes (ours is written compact, Celery's with spaces: readers parse it either way)."""
    out = {f"headers.{k}": v for k, v in message["headers"].items()}
    out.update({f"properties.{k}": v for k, v in message["properties"].items() if k != "delivery_info"})
    out.update({k: v for k, v in message.items() if k not in ("headers", "properties", "body")})
    out["body"] = json.loads(base64.b64decode(message["body"]))
    return out


@pytest.mark.parametrize(
    "task, kwargs, expires_s",
    [
        (contract.TASK_PROBE, COMMAND, dispatch.START_GRACE_S),  # a probe command
        ("server.advance", {"sweep_id": 3}, None),  # a server task: no expiry
    ],
)
def test_a_message_is_field_for_field_what_celery_writes(client, task, kwargs, expires_s):
    theirs, mine = celery_writes(client, task, kwargs, expires_s), ours(client, task, kwargs, expires_s)
    a, b = fields(theirs), fields(mine)
    assert a.keys() == b.keys()
    assert {k: v for k, v in a.items() if k.split(".")[-1] not in PER_MESSAGE} == {
        k: v for k, v in b.items() if k.split(".")[-1] not in PER_MESSAGE
    }
    assert json.loads(base64.b64decode(mine["body"])) == [[], kwargs, dispatch._EMBED]
    assert mine["properties"]["delivery_info"] == {"exchange": "", "routing_key": "test.wire.ours"}
    headers, properties = mine["headers"], mine["properties"]
    assert headers["id"] == headers["root_id"] == properties["correlation_id"] != properties["delivery_tag"]
    if expires_s is None:
        assert headers["expires"] is None and "expiration" not in properties
    else:  # the same instant as Celery's, within the time between the two sends
        delta = datetime.fromisoformat(headers["expires"]) - datetime.fromisoformat(theirs["headers"]["expires"])
        assert abs(delta.total_seconds()) < 1.0


def test_the_ingest_consumer_reads_it_and_its_expiry():
    raw = dispatch.task_message(contract.TASK_RESULT, contract.INGEST_QUEUE, {"result": {"a": 1}}, 30.0)
    assert messages.decode(raw) == (contract.TASK_RESULT, {"result": {"a": 1}}, False)
    gone = dispatch.task_message(contract.TASK_HEARTBEAT, contract.INGEST_QUEUE, {"heartbeat": {}}, -1.0)
    assert messages.decode(gone)[2] is True


def test_a_round_of_commands_lands_on_each_nodes_queue_in_order(client, settings):
    queues = [f"test.wire.n{i}" for i in range(3)]
    client.delete(*queues)
    sent = [(contract.TASK_PROBE, q, {"command": {"node": q, "n": k}}, 5.0) for k in range(2) for q in queues]
    try:
        dispatch._redis_send(sent)
        for q in queues:  # Celery's Redis transport pushes on the left and a worker pops on the right
            got = [messages.read(raw)[1]["command"]["n"] for raw in reversed(client.lrange(q, 0, -1))]
            assert got == [0, 1]
    finally:
        client.delete(*queues)
