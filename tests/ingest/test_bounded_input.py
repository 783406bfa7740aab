"""Agent input is bounded: oversized, NaN, NUL-laden and deeply nested messages are rejected or cleaned."""

from __future__ import annotations

import time

import pytest
from django.contrib.auth.models import User

from agents import contract
from cluster_health import ingest
from cluster_health.models import Node, PairProbe, RejectedMessage
from devtools.sweep_driver import heartbeat, result_for

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("memory_channel_layer")]


def beat(facts, name="n0") -> dict:
    return {"v": 1, "node": name, "address": "10.0.0.1", "facts": facts, "agent_version": "t", "sent_at": time.time()}


def nested(depth: int):
    val: object = "leaf"
    for _ in range(depth):
        val = {"x": val}
    return val


@pytest.mark.parametrize(
    "why, facts, words",
    [
        ("5 MiB", {"blob": ["x" * 4000] * 1300}, "entries"),
        ("250 KiB strings past the total", {f"k{i}": "x" * 4000 for i in range(70)}, "bytes"),
        ("2,000 NCCL variables", {"env": {f"NCCL_X{i}": "1" for i in range(2000)}}, "facts.env"),
        ("300 NCCL variables", {"env": {f"NCCL_X{i}": "1" for i in range(300)}}, "facts.env"),
        ("one huge string", {"kernel": "x" * 10_000}, "facts.kernel"),
        ("NaN", {"load": float("nan")}, "not finite"),
        ("infinity", {"mem": {"free": float("inf")}}, "not finite"),
        ("deep nesting", nested(10), "nested too deep"),
        ("a set", {"gpus": {1, 2}}, "not a JSON value"),
    ],
)
def test_it_rejects_unbounded_facts_and_keeps_a_bounded_record(why, facts, words):
    heartbeat("n0", address="10.0.0.1")
    assert ingest.record_heartbeat(beat(facts)) == "rejected", why
    rejected = RejectedMessage.objects.get()
    assert words in rejected.error, rejected.error
    assert len(str(rejected.payload)) < 20_000
    assert Node.objects.get(name="n0").facts == {}


def test_it_strips_nul_from_facts_and_texts():
    assert ingest.record_heartbeat(beat({"kernel": "6.1\x00-x", "env\x00": {"NCCL_DEBUG": "IN\x00FO"}})) == "applied"
    assert Node.objects.get(name="n0").facts == {"kernel": "6.1-x", "env": {"NCCL_DEBUG": "INFO"}}


def test_a_nul_in_an_address_is_rejected_and_recorded():
    assert ingest.record_heartbeat({**beat({}), "address": "10.0.0.1\x00"}) == "rejected"
    assert RejectedMessage.objects.count() == 1


def test_a_rejected_message_full_of_nul_is_still_recorded():
    poisoned = {"v": 1, "node": "n\x00", "address": "\x00", "facts": {"a\x00": "\x00"}}
    assert ingest.record_heartbeat(poisoned) == "rejected"
    rejected = RejectedMessage.objects.get()
    assert "\x00" not in rejected.node and "\x00" not in rejected.error


def test_a_nul_in_a_stderr_tail_does_not_lose_the_half(driver, open_pair):
    sweep, a, b = open_pair
    stderr = "Traceback\x00 (most recent call last)\n" * 100
    half = result_for(a, status="failed", reason="refused", stderr_tail=stderr, hint="h\x00int")
    assert driver.ingest(half) == "applied"
    assert driver.ingest(result_for(b, stage_times={"items": 0.5, "init": 0.1}, extra={"why": "\x00"})) == "final"
    probe = PairProbe.objects.get(pk=a["probe_id"])
    assert probe.status == "failed" and "\x00" not in probe.half_a["stderr_tail"] and probe.hint
    assert RejectedMessage.objects.count() == 0


def test_a_nul_in_the_evidence_does_not_lose_the_half(driver, open_pair):
    sweep, a, b = open_pair
    # A stack dump at the deadline may hold NUL; PostgreSQL's jsonb refuses it, so it is removed.
    assert driver.ingest(result_for(a, evidence={"stack": "frame\x00 1", "sockets\x00": []})) == "applied"
    assert PairProbe.objects.get(sweep=sweep).half_a["evidence"] == {"stack": "frame 1", "sockets": []}
    assert RejectedMessage.objects.count() == 0


def test_a_message_nested_past_the_recursion_limit_is_rejected_and_recorded():
    assert ingest.record_heartbeat({**beat({}), "v": nested(5000)}) == "rejected"
    assert ingest.ingest_result({"v": 1, "evidence": nested(5000)}) == "rejected"
    assert RejectedMessage.objects.count() == 2


def test_a_stage_named_items_does_not_break_the_pair_page(client, driver, open_pair):
    sweep, a, b = open_pair
    driver.ingest(result_for(a, stage_times={"items": 0.5, "init": 0.1}))
    driver.ingest(result_for(b, stage_times={"items": 0.25}))
    client.force_login(User.objects.create_user("v", password="pw-v-123456"))
    page = client.get("/pairs/n0/n1/")
    assert page.status_code == 200 and "items" in page.content.decode()


@pytest.mark.parametrize(
    "field, value",
    [
        ("extra", {f"k{i}": 1 for i in range(100)}),
        ("versions", nested(8)),
        ("timings", {"x": float("nan")}),
    ],
)
def test_it_rejects_unbounded_result_details(driver, open_pair, field, value):
    sweep, a, b = open_pair
    assert driver.ingest(result_for(a, **{field: value})) == "rejected"
    assert PairProbe.objects.get(sweep=sweep).half_a is None


def test_the_contract_bounds_match_the_documented_limits():
    assert contract.MAX_FACTS_BYTES == 256 * 1024 and contract.MAX_FACTS_ENV == 256 and contract.MAX_FACTS_DEPTH == 6


def test_prune_is_scheduled_and_bounds_rejected_messages(settings):
    from django_celery_beat.models import PeriodicTask

    from cluster_health import tasks, vocabulary

    assert PeriodicTask.objects.get(name="prune").task == vocabulary.TASK_PRUNE
    settings.MAX_REJECTED_MESSAGES = 100
    for i in range(130):
        ingest.record_heartbeat({"v": 1, "node": f"n{i}", "address": "bad address"})
    assert tasks.prune()["rejected"] >= 30
    assert RejectedMessage.objects.count() <= 100


@pytest.mark.parametrize(
    "why, extra, words",
    [
        ("a detail object of 64 strings of 4 KiB", {"timings": {f"t{i}": "x" * 4000 for i in range(64)}}, "timings"),
        (
            "every detail object just under its own bound",
            {
                f: {f"k{i}": "x" * 1000 for i in range(8)}
                for f in ("versions", "peer_versions", "stage_times", "timings", "extra")
            }
            | {"stderr_tail": "é" * 16000, "evidence": {"note": "z" * 8000}},
            "result:",
        ),
    ],
)
def test_a_half_is_bounded_in_size_as_a_whole(driver, why, extra, words):
    """A half is stored on its pair row and read with every pair page: about 5 KiB, never a megabyte."""
    heartbeat("n0"), heartbeat("n1")
    driver.sweep(kind="pairs", pairs=[["n0", "n1"]])
    a, _ = sorted(driver.take(), key=lambda c: c["rank"])
    assert driver.ingest(result_for(a, **extra)) == "rejected", why
    assert words in RejectedMessage.objects.get().error
    assert PairProbe.objects.get().half_a is None
    assert driver.ingest(result_for(a, stderr_tail="y" * 16000)) == "applied"  # a full stderr tail alone fits


def test_a_flood_of_junk_is_counted_and_only_a_minutes_budget_kept(settings, client):
    """A flood of rejected messages (junk, or a fleet whose clocks are off) costs a counter each, not a row."""
    from prometheus_client.parser import text_string_to_metric_families

    from cluster_health import shared_redis
    from cluster_health.ingest import rejects

    settings.REJECTED_STORED_PER_MINUTE = 5
    settings.METRICS_TOKEN = ""
    redis_client = shared_redis.client()
    for key in redis_client.scan_iter(rejects.COUNTS_KEY + ":minute:*"):
        redis_client.delete(key)  # this minute's budget unspent
    counted_before, unkept_before = rejects.counts()
    for i in range(60):
        assert ingest.record_heartbeat({"v": 1, "node": f"junk{i}", "address": "not an address"}) == "rejected"
    kept = RejectedMessage.objects.count()
    assert 5 <= kept <= 10  # 5 a minute (10 if the minute turned meanwhile)
    counted, unkept = rejects.counts()
    assert (counted - counted_before, unkept - unkept_before) == (60, 60 - kept)
    families = {f.name: f for f in text_string_to_metric_families(client.get("/metrics").content.decode())}
    assert families["cluster_health_rejected_messages_counted"].samples[0].value == counted
    assert families["cluster_health_rejected_messages_unkept"].samples[0].value == unkept
    assert families["cluster_health_rejected_messages"].samples[0].value == kept
