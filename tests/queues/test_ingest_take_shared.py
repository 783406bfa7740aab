"""Several ingest consumers on the same nodes' lists: every message is taken by exactly one of them.

Each take is one Lua script (consumer.TAKE_SCRIPT), so two consumers taking at the same moment
never hold the same message; applying a half twice (a dead consumer's batch put back) changes
nothing either (tests/ingest/test_ingest_consumer.py). Here two consumers, each with its own
connection and ``taken`` list, drain 40 nodes' lists at once on a real redis-server.
"""

from __future__ import annotations

import threading
from collections import Counter

import redis

from agents import contract
from cluster_health.ingest import consumer
from cluster_health.queues import keys
from devtools.services import RedisServer

NODES, EACH = 40, 150  # 6,000 messages; per node more than a batch's share, so every batch is full


def drain(server: RedisServer, name: str, got: list, start: threading.Barrier) -> None:
    client = redis.Redis.from_url(server.url)
    taker = consumer.Consumer(name, client)
    start.wait(10)
    try:
        for turn in range(1000):  # bounded: 6,000 messages need a dozen batches between the two
            batch = taker.take()
            if turn == 0:
                # Both took their first batch at the same moment; then each runs free. (Without this a loaded
                # machine may schedule one thread for every batch before the other runs once.)
                start.wait(10)
            if not batch and not keys.waiting_on_ingest(client):
                return
            got.extend(batch)
            client.delete(taker.taken)  # applied: the batch is let go, as step() lets it go after the commit
    finally:
        client.close()


def test_two_consumers_on_the_same_lists_never_take_one_message_twice(tmp_path):
    server = RedisServer(tmp_path / "redis")
    server.workdir.mkdir(parents=True)
    server.start()
    try:
        admin = redis.Redis.from_url(server.url)
        sent = []
        for n in range(NODES):
            messages = [f"n{n}-{i}".encode() for i in range(EACH)]
            admin.lpush(contract.ingest_queue(f"n{n}"), *messages)
            sent.extend(messages)
        got: dict[str, list] = {"a@test": [], "b@test": []}
        start = threading.Barrier(2)
        threads = [threading.Thread(target=drain, args=(server, name, got[name], start)) for name in got]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
        taken = Counter(got["a@test"] + got["b@test"])
        assert not [m for m, count in taken.items() if count > 1], "a message taken twice"
        assert set(taken) == set(sent) and len(taken) == NODES * EACH  # and none lost
        assert got["a@test"] and got["b@test"], "both consumers took batches"
        # Each node's messages came out oldest first, whichever consumer took them.
        for name in got:
            seen: dict[str, int] = {}
            for message in got[name]:
                node, _, i = message.decode().partition("-")
                assert seen.get(node, -1) < int(i), (name, message)
                seen[node] = int(i)
        assert not keys.dropped(admin)  # 150 a node is under the cap: nothing dropped
        admin.close()
    finally:
        server.stop()
