"""One node floods its ingest list while other nodes' sweep runs, through the real stack: real agents, the
server worker's ingest consumer and its reaper on a real Redis.

Before per-node lists every node appended to one shared list: 20,000 messages from one node queued every
other node's halves and heartbeats behind them, and past 1,100 waiting messages the reaper judged nothing
(no timeout, no offline) until the consumer had worked through them.
"""

from __future__ import annotations

import json
import threading
import time
from datetime import timedelta

import pytest
import redis
from django.utils import timezone

from agents import contract, signing
from cluster_health.ingest import rejects
from cluster_health.models import Node, PairProbe
from cluster_health.queues import dispatch, keys
from cluster_health.web import metrics
from devtools import services
from tests.support.sweep_setup import FAST, manage, open_pairs, running_agents

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

FLOODER = "flood0"
FLOOD = 20_000  # messages, in chunks of CHUNK, one chunk every PACE_S: over about ten seconds
CHUNK, PACE_S = 100, 0.05
MESSAGE_BYTES = 2000  # each: unbounded, the flood alone would hold some 40 MB in Redis


def flood_message(victim: str) -> bytes:
    """A half that names another node and is signed with a key the server never issued: forged."""
    half = {"v": 1, "kind": "pair", "probe_id": 1, "node": victim, "rank": 0, "hint": "x" * MESSAGE_BYTES}
    auth = signing.sign(half, signing.new_key(victim), "result")
    return dispatch.task_message(
        contract.TASK_RESULT, contract.ingest_queue(FLOODER), {"result": half, "auth": auth}, None
    ).encode()


def test_a_node_flooding_its_ingest_list_delays_no_other_node_and_blinds_no_judgement(stack, driver, settings):
    names = ["e0", "e1", "e2", "e3"]
    running_agents(stack, names)
    stack.keys.setdefault(FLOODER, signing.new_key(FLOODER))  # an enrolled node: its user is the one stolen
    stack.restore_keys()
    # A pair of two other nodes whose deadline passes during the flood: the reaper must still judge it.
    overdue_sweep, _ = open_pairs(stack, driver, "fld", 1)
    overdue = PairProbe.objects.get(sweep_id=overdue_sweep)
    PairProbe.objects.filter(pk=overdue.pk).update(deadline=timezone.now() + timedelta(seconds=3))

    client = redis.Redis.from_url(stack.redis.url)
    queue, raw = contract.ingest_queue(FLOODER), flood_message("e0")
    base_memory = client.info("memory")["used_memory"]
    rejected_before = (rejects.counts() or (0, 0))[0]
    longest, most_memory, pushed, ended = [0], [0], [0], [timezone.now()]
    done = threading.Event()

    def flood() -> None:
        flooding = redis.Redis.from_url(stack.redis.url)
        try:
            while pushed[0] < FLOOD:
                pipe = flooding.pipeline(transaction=False)
                for _ in range(CHUNK):
                    pipe.lpush(queue, raw)
                pipe.execute()
                pushed[0] += CHUNK
                time.sleep(PACE_S)
        finally:
            flooding.close()
            ended[0] = timezone.now()
            done.set()

    def watch() -> None:
        while not done.is_set():
            longest[0] = max(longest[0], client.llen(queue))
            most_memory[0] = max(most_memory[0], client.info("memory")["used_memory"] - base_memory)
            time.sleep(0.05)

    threads = [threading.Thread(target=flood, daemon=True), threading.Thread(target=watch, daemon=True)]
    for thread in threads:
        thread.start()
    try:
        started = time.monotonic()
        run = manage(stack, "sweep", "--kind", "full", "--nodes", ",".join(names), "--wait", "--json", *FAST)
        elapsed = time.monotonic() - started
        assert done.wait(60), "the flood ended"
    finally:
        done.set()
        for thread in threads:
            thread.join(10)
    try:
        assert run.returncode == 0, run.stdout + run.stderr
        report = json.loads(run.stdout)
        print(f"flooded: 4-node full sweep {elapsed:.1f}s, list at most {longest[0]}, +{most_memory[0] >> 20} MiB")
        assert (report["status"], report["verdict"]) == ("finished", "pass"), report
        assert {p["status"] for p in report["pairs"]} == {"ok"} and len(report["pairs"]) == 6
        assert elapsed < 60, f"the sweep took {elapsed:.0f}s under the flood"
        assert not Node.objects.filter(name__in=names, last_heartbeat__lt=Node.online_cutoff()).exists()
        # The reaper judged through the flood: the overdue pair closed while the flood still ran.
        overdue.refresh_from_db()
        assert overdue.status == "timeout" and overdue.finished < ended[0], (overdue.status, overdue.finished, ended)
        # Redis held the cap and what arrived between two takes (about a second of the flood), never the flood:
        # unbounded, the list would have reached 20,000 messages.
        assert pushed[0] == FLOOD and longest[0] < FLOOD // 5, longest[0]
        assert most_memory[0] < FLOOD * len(raw) // 4, f"Redis grew by {most_memory[0] >> 20} MiB"
        services.wait_until(lambda: client.llen(queue) <= keys.NODE_CAP, 10, message="the list trimmed to its cap")

        # Every forged message accounted for: dropped past the cap (counted per node, named in /metrics) or
        # taken and rejected (counted); how many of each depends only on how fast the consumer took them.
        def accounted() -> tuple[int, int]:
            return keys.dropped(client).get(FLOODER, 0), (rejects.counts() or (0, 0))[0] - rejected_before

        services.wait_until(lambda: sum(accounted()) >= FLOOD, 30, message=f"the {FLOOD} forged messages accounted for")
        dropped, rejected = accounted()
        assert dropped > 0 and client.llen(queue) == 0, (dropped, rejected)
        shown = metrics.render().decode()
        assert f'cluster_health_ingest_dropped_total{{node="{FLOODER}"}} {float(dropped)}' in shown
    finally:
        client.delete(queue)
        client.close()
