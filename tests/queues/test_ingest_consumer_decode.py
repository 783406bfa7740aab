"""The ingest consumer's reading of raw queue messages: whatever is on the queue, it answers or refuses."""

from __future__ import annotations

import base64
import json
from datetime import UTC, datetime, timedelta

import pytest

from agents import contract, signing
from cluster_health import vocabulary
from cluster_health.queues import messages


def stored(kwargs, task=contract.TASK_RESULT, **headers) -> bytes:
    """A message as Celery's Redis transport stores it (protocol 2, JSON body, base64)."""
    body = base64.b64encode(json.dumps([[], kwargs, {}]).encode()).decode()
    message = {
        "body": body,
        "content-encoding": "utf-8",
        "content-type": "application/json",
        "headers": {"task": task, "id": "x", **headers},
        "properties": {"body_encoding": "base64", "delivery_tag": "t"},
    }
    return json.dumps(message).encode()


def test_it_reads_a_task_message_and_its_expiry():
    past = (datetime.now(UTC) - timedelta(seconds=5)).isoformat()
    future = (datetime.now(UTC) + timedelta(seconds=60)).isoformat()
    assert messages.decode(stored({"result": {"a": 1}})) == (contract.TASK_RESULT, {"result": {"a": 1}}, False)
    assert messages.decode(stored({}, expires=past))[2] is True
    assert messages.decode(stored({}, expires=future))[2] is False
    assert messages.decode(stored({}, expires="not a time"))[2] is False


@pytest.mark.parametrize(
    "raw",
    [
        b"",
        b"\x00\xff",
        b"[]",
        b'"text"',
        json.dumps({"headers": "not an object", "body": ""}).encode(),
        json.dumps({"headers": [], "body": "W10=", "properties": {"body_encoding": "base64"}}).encode(),
        json.dumps({"headers": {}, "body": "!!", "properties": {"body_encoding": "base64"}}).encode(),
        json.dumps({"headers": {}, "body": "[1]", "properties": "x"}).encode(),
        json.dumps({"headers": {}, "body": json.dumps([[], "kwargs", {}])}).encode(),
        b"[" * 100_000,
    ],
)
def test_anything_else_is_refused_with_a_reason_never_an_exception_of_another_kind(raw):
    with pytest.raises(ValueError, match="not a task message|bytes, more than"):
        messages.decode(raw)


def test_a_message_too_large_for_a_half_is_refused_unread():
    with pytest.raises(ValueError, match="more than the"):
        messages.decode(b" " * (messages.MAX_MESSAGE_BYTES + 1))


@pytest.mark.django_db
def test_the_reapers_backlog_reads_messages_with_the_same_reader_and_believes_only_signed_ones():
    from cluster_health.models import AgentKey
    from cluster_health.queues.backlog import Backlog

    keys = {n: signing.new_key(n) for n in ("n1", "n2")}
    AgentKey.objects.bulk_create([AgentKey.sealed(k) for k in keys.values()])
    beat = {"v": 1, "node": "n1"}
    half = {"node": "n2", "kind": "pair", "probe_id": 7}
    good = Backlog()
    good.add(
        stored({"heartbeat": beat, "auth": signing.sign(beat, keys["n1"], "heartbeat")}, task=contract.TASK_HEARTBEAT)
    )
    good.add(stored({"result": half, "auth": signing.sign(half, keys["n2"], "result")}))
    good.add(stored({"sweep_id": 3}, task=vocabulary.TASK_START_SWEEP))
    good.settle()
    assert (good.nodes, good.probes, good.sweeps, good.messages, good.complete) == (
        {"n1", "n2"},
        {("pair", 7)},
        {3},
        3,
        True,
    )
    # Unsigned, forged, the wrong shape, unreadable: counted, and no node's or probe's, so they defer
    # no judgement (a forged message naming a node must never keep it from being judged offline).
    forged = signing.sign(half, signing.new_key("n2"), "result")
    for raw in (
        stored({"heartbeat": {"node": "n1"}}, task=contract.TASK_HEARTBEAT),
        stored({"result": half, "auth": forged}),
        stored({"result": {**half, "probe_id": 8}, "auth": signing.sign(half, keys["n2"], "result")}),
        stored({"heartbeat": "n1"}, task=contract.TASK_HEARTBEAT),
        stored({"results": ["not a half"]}),
        stored({"result": 5}),
        stored({"heartbeat": {"node": "n\ud800"}, "auth": {"node": "n\ud800"}}, task=contract.TASK_HEARTBEAT),
        b"\x00\xff",
    ):
        bad = Backlog()
        bad.add(raw)
        bad.settle()
        assert (bad.messages, bad.complete, bad.nodes, bad.probes) == (1, True, set(), set()), raw
