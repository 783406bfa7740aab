"""Sweeps advance round by round through ingest; verdicts and findings at the end."""

import pytest

from cluster_health import sweeps
from cluster_health.models import Finding, GroupProbe, PairProbe, Sweep
from cluster_health.shapes import broadcast
from devtools.sweep_driver import heartbeat, result_for

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("memory_channel_layer")]


def nodes(n, facts=None):
    names = [f"n{i}" for i in range(n)]
    for name in names:
        heartbeat(name, facts=facts)
    return names


def failing(fails, **failure):
    """Agents' answers: ``result_for(c, **failure)`` for a command whose nodes (its own, then its peers')
    ``fails(names)`` is true of; an ok result for every other."""

    def answer(c):
        if fails([c["node"], *(p["name"] for p in c["peers"])]):
            return result_for(c, **failure)
        return result_for(c)

    return answer


def test_it_runs_a_4_node_connectivity_sweep_in_3_rounds_of_disjoint_pairs(driver):
    nodes(4)
    sweep = driver.sweep(kind="connectivity")
    seen_rounds = []
    while True:
        cmds = driver.take()
        if not cmds:
            break
        sweep.refresh_from_db()
        seen_rounds.append(sweep.current_round)
        names = [c["node"] for c in cmds]
        assert len(names) == len(set(names)) == 4, "every node in exactly one probe per round"
        assert {c["last_stage"] for c in cmds} == {"collective"}
        for c in cmds:
            driver.ingest(result_for(c))
    sweep.refresh_from_db()
    assert seen_rounds == [1, 2, 3]
    assert sweep.status == "finished" and sweep.verdict == "pass"
    assert PairProbe.objects.filter(sweep=sweep, status="ok").count() == 6


def test_it_builds_commands_the_agent_accepts(driver):
    nodes(2)
    driver.sweep(kind="full", sizes=[1024, 4096], timeouts={"connect": 1.0})
    a, b = sorted(driver.take(), key=lambda c: c["rank"])
    assert (a["rank"], b["rank"]) == (0, 1)
    assert a["rendezvous"] == b["rendezvous"] and len(a["rendezvous"]) == 32
    assert a["master_address"] == b["master_address"] == a["bind_address"]
    assert a["last_stage"] == "bandwidth" and a["sizes"] == [1024, 4096]
    assert a["peers"] == [{"name": "n1", "address": "127.0.0.1"}]
    assert a["timeouts"]["connect"] == 1.0


def test_it_gives_each_node_one_bye_with_5_nodes(driver):
    nodes(5)
    sweep = driver.sweep(kind="connectivity")
    driver.answer_all()
    sweep.refresh_from_db()
    assert sweep.total_rounds == 5 and sweep.verdict == "pass"
    assert PairProbe.objects.filter(sweep=sweep).count() == 10


def test_it_ends_a_full_sweep_with_a_group_collective(driver):
    nodes(4)
    sweep = driver.sweep(kind="full", sizes=[1024])
    kinds = []
    driver.answer_all(lambda c: kinds.append((c["kind"], c["world_size"])) or result_for(c))
    sweep.refresh_from_db()
    assert kinds[-4:] == [("group", 4)] * 4
    assert GroupProbe.objects.get(sweep=sweep).status == "ok"
    assert sweep.status == "finished" and sweep.verdict == "pass"
    assert sweep.current_round == sweep.total_rounds == 4


def test_it_warns_when_versions_differ(driver):
    nodes(3, facts={"versions": {"torch": "2.4.0"}})
    heartbeat("n3", facts={"versions": {"torch": "2.3.1"}})
    sweep = driver.sweep(kind="full", sizes=[1024])
    driver.answer_all()
    sweep.refresh_from_db()
    assert sweep.verdict == "warn"
    f = Finding.objects.get(sweep=sweep, code="version_mismatch")
    assert f.subject == "n3" and "2.3.1" in f.text


def test_it_blames_the_node_whose_every_pair_failed(driver):
    nodes(4)
    sweep = driver.sweep(kind="connectivity")
    driver.answer_all(
        failing(
            lambda names: "n2" in names, status="failed", stage="connect", reason="refused", hint="connection refused"
        )
    )
    sweep.refresh_from_db()
    assert sweep.verdict == "fail"
    findings = list(Finding.objects.filter(sweep=sweep, severity="fail"))
    assert [(f.code, f.subject) for f in findings] == [("node_unreachable", "n2")]


def test_it_blames_the_link_when_one_pair_fails(driver):
    nodes(4)
    sweep = driver.sweep(kind="connectivity")
    driver.answer_all(
        failing(lambda names: set(names) == {"n0", "n3"}, status="timeout", stage="init", reason="transport")
    )
    sweep.refresh_from_db()
    findings = list(Finding.objects.filter(sweep=sweep, severity="fail"))
    assert [(f.code, f.subject) for f in findings] == [("link_failed", "n0<->n3")]
    pair = PairProbe.objects.get(sweep=sweep, status="timeout")
    assert (pair.stage, pair.reason) == ("init", "transport")


def test_it_marks_pairs_below_baseline_degraded(driver):
    nodes(2)
    first = driver.sweep(kind="pairs", pairs=[["n0", "n1"]], sizes=[1024])
    driver.answer_all(lambda c: result_for(c, busbw=10.0))
    second = driver.sweep(kind="pairs", pairs=[["n0", "n1"]], sizes=[1024], baseline=f"sweep:{first.pk}")
    driver.answer_all(lambda c: result_for(c, busbw=5.0))
    second.refresh_from_db()
    pair = PairProbe.objects.get(sweep=second)
    assert (pair.status, pair.reason) == ("degraded", "below_baseline")
    assert second.verdict == "warn"


def test_it_cancels_a_running_sweep_and_ignores_late_results(driver):
    nodes(4)
    sweep = driver.sweep(kind="connectivity")
    cmds = driver.take()
    assert sweeps.cancel(sweep.pk)
    assert driver.ingest(result_for(cmds[0])) == "late"
    sweep.refresh_from_db()
    assert sweep.status == "cancelled" and sweep.verdict == "unknown"
    assert set(PairProbe.objects.filter(sweep=sweep).values_list("status", flat=True)) == {"skipped"}


def test_it_fails_a_sweep_that_names_an_unknown_node(driver):
    nodes(2)
    sweep = driver.sweep(kind="connectivity", nodes=["n0", "nope"])
    sweep.refresh_from_db()
    assert sweep.status == "failed" and "nope" in sweep.error


def test_it_refuses_out_of_bounds_requests():
    with pytest.raises(sweeps.SweepRequestError, match="sizes"):
        sweeps.clean_request(kind="full", sizes=[2**40])
    with pytest.raises(sweeps.SweepRequestError, match="iterations"):
        sweeps.clean_request(kind="full", iterations=10**6)
    with pytest.raises(sweeps.SweepRequestError, match="kind"):
        sweeps.clean_request(kind="everything")
    with pytest.raises(sweeps.SweepRequestError, match="master_port"):
        sweeps.clean_request(kind="preflight")


def test_it_broadcasts_after_commit(driver):
    from asgiref.sync import async_to_sync
    from channels.layers import get_channel_layer

    layer = get_channel_layer()
    nodes(2)
    async_to_sync(layer.group_add)("overview", "test.channel")
    sweep = driver.sweep(kind="connectivity")
    msg = async_to_sync(layer.receive)("test.channel")
    assert msg["type"] == "sweep.update" and msg["sweep"] == sweep.pk
    assert Sweep.objects.get(pk=sweep.pk).status == msg["status"] or msg["status"] == "pending"


def round_change_queries(driver, n: int) -> int:
    """Queries of the ingest that closes round 1 of an n-node sweep and dispatches round 2."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    names = [f"q{n}-{i}" for i in range(n)]
    for name in names:
        heartbeat(name)
    sweep = driver.sweep(kind="connectivity", nodes=names)
    *first, last = driver.take()
    for c in first:
        driver.ingest(result_for(c))
    # The round change counts the whole sweep unless it did so within SWEEP_COUNT_EVERY_S: a round of 16 nodes
    # that took longer than that under load was counted where the round of 4 was not (one query more).
    broadcast._last_sweep_count.pop(sweep.pk, None)
    with CaptureQueriesContext(connection) as queries:
        driver.ingest(result_for(last))
    assert len(driver.take()) == n  # round 2 went out to every node
    assert Sweep.objects.get(pk=sweep.pk).current_round == 2
    return len(queries)


def test_a_round_is_dispatched_in_as_many_queries_whatever_its_size(driver):
    # A field the dispatch reads but did not select would cost a query per row.
    assert round_change_queries(driver, 4) == round_change_queries(driver, 16)


def test_a_round_leaves_a_silent_looking_node_in_while_its_heartbeat_waits_on_the_server(driver, settings):
    import time
    from datetime import timedelta

    import redis
    from django.utils import timezone

    from cluster_health.models import Node
    from tests.support.sweep_setup import reserved_heartbeat

    nodes(3)
    Node.objects.filter(name="n1").update(last_heartbeat=timezone.now() - timedelta(hours=1))
    broker = redis.Redis.from_url(settings.REDIS_URL)
    tag = "test-rounds-reserved-n1"
    broker.hset("unacked", tag, reserved_heartbeat("n1"))  # a worker fetched n1's heartbeat, not yet applied
    broker.zadd("unacked_index", {tag: time.time()})
    try:
        waited = driver.sweep(kind="connectivity", nodes=["n0", "n1"])
        assert PairProbe.objects.get(sweep=waited).status == "running"
    finally:
        broker.hdel("unacked", tag)
        broker.zrem("unacked_index", tag)
        broker.close()
    driver.run(sweeps.cancel, waited.pk)
    driver.take()
    silent = driver.sweep(kind="connectivity", nodes=["n0", "n1"])
    assert (PairProbe.objects.get(sweep=silent).status, PairProbe.objects.get(sweep=silent).reason) == (
        "offline",
        "agent_offline",
    )
    online = driver.sweep(kind="connectivity", nodes=["n0", "n2"])
    assert PairProbe.objects.get(sweep=online).status == "running"


def test_a_sweep_over_nodes_being_swept_waits_its_turn_and_then_runs(driver):
    """Two sweeps on one node compete for its single command slot: the second's commands would expire
    as false timeouts. It stays pending, shown queued behind the first, and starts when that one ends."""
    from cluster_health import vocabulary
    from cluster_health.shapes import documents

    for n in ("n0", "n1", "n2", "n3", "m0", "m1"):
        heartbeat(n)
    first = driver.sweep(kind="connectivity", nodes=["n0", "n1", "n2", "n3"])
    first_commands = driver.take()
    second = driver.sweep(kind="connectivity", nodes=["n2", "n3"])
    apart = driver.sweep(kind="connectivity", nodes=["m0", "m1"])  # other nodes: runs at once
    second.refresh_from_db(), apart.refresh_from_db()
    assert (second.status, second.params["queued_behind"]) == ("pending", [first.pk])
    assert documents.sweep_json(second, with_pairs=False)["queued_behind"] == [first.pk]
    assert apart.status == "running"
    assert {c["node"] for c in driver.take()} == {"m0", "m1"}  # nothing for the queued sweep's nodes
    assert not PairProbe.objects.filter(sweep=second).exists()
    for cmd in first_commands:
        driver.ingest(result_for(cmd))
    driver.answer_all()
    first.refresh_from_db()
    assert first.status == "finished"
    starts = [kw["sweep_id"] for task, kw in driver.server_tasks if task == vocabulary.TASK_START_SWEEP]
    assert second.pk in starts  # sent when the first ended
    driver.run(sweeps.start_sweep, second.pk)
    second.refresh_from_db()
    assert second.status == "running" and "queued_behind" not in second.params
    driver.answer_all()
    second.refresh_from_db()
    assert (second.status, second.verdict) == ("finished", "pass")


def test_the_sweep_page_says_what_a_queued_sweep_waits_for(driver, viewer_client):
    from django.urls import reverse

    for n in ("n0", "n1"):
        heartbeat(n)
    first = driver.sweep(kind="connectivity", nodes=["n0", "n1"])
    second = driver.sweep(kind="connectivity", nodes=["n0", "n1"])
    page = viewer_client.get(reverse("sweep", args=[second.pk])).content.decode()
    assert "Queued: it starts when" in page and f"/sweeps/{first.pk}/" in page
