"""The Redis rendezvous: the other ranks wait for rank 0's store port without counting its torch import."""

from __future__ import annotations

import secrets
import threading
import time

import pytest

from agents.rendezvous import PeerFailed, RedisRendezvous, RendezvousTimeout

pytestmark = pytest.mark.timeout(30)


def pair_of(redis_url: str) -> tuple[RedisRendezvous, RedisRendezvous]:
    """Rank 0 and rank 1 of one probe, with the probe's key from its commands."""
    rdv, key = "r" + secrets.token_hex(8), secrets.token_hex(16)
    return (
        RedisRendezvous(redis_url, rdv, 30.0, secret=key, master="n0"),
        RedisRendezvous(redis_url, rdv, 30.0, secret=key, master="n0"),
    )


def later(delay_s: float, fn) -> threading.Thread:
    thread = threading.Thread(target=lambda: (time.sleep(delay_s), fn()), daemon=True)
    thread.start()
    return thread


def test_a_master_still_importing_torch_does_not_use_up_the_store_wait(redis_url):
    master, peer = pair_of(redis_url)
    master.publish_importing()
    publisher = later(1.5, lambda: master.publish("127.0.0.1", 4242))
    began = time.monotonic()
    assert peer.lookup(0.5, pause_max_s=5.0) == 4242  # 1.5 s of import, 0.5 s of store wait
    assert time.monotonic() - began >= 1.4
    publisher.join()


def test_the_pause_is_bounded_and_the_timeout_says_the_master_had_started(redis_url):
    master, peer = pair_of(redis_url)
    master.publish_importing()
    began = time.monotonic()
    with pytest.raises(RendezvousTimeout) as caught:
        peer.lookup(0.5, pause_max_s=1.0)
    assert 1.4 <= time.monotonic() - began < 5.0
    assert caught.value.master_started is True
    assert "+1.0s while the master imported torch" in str(caught.value)


def test_a_master_that_never_started_times_out_after_the_store_wait_alone(redis_url):
    _, peer = pair_of(redis_url)
    began = time.monotonic()
    with pytest.raises(RendezvousTimeout) as caught:
        peer.lookup(0.5, pause_max_s=5.0)
    assert time.monotonic() - began < 2.0
    assert caught.value.master_started is False


def test_the_import_mark_never_hides_a_port_or_a_failure(redis_url):
    master, peer = pair_of(redis_url)
    master.publish("127.0.0.1", 4242)
    master.publish_importing()  # a late mark (NX) leaves the port in place
    assert peer.lookup(0.5) == 4242
    master, peer = pair_of(redis_url)
    master.publish_importing()
    master.publish_failure("port_in_use", "taken")
    with pytest.raises(PeerFailed, match="taken"):
        peer.lookup(0.5)


def test_values_another_node_planted_are_ignored_and_named_when_nothing_else_came(redis_url):
    """Every node's broker user may write rendezvous keys: a planted port (to a listener of the planter's)
    or failure (with text of its choosing) without the probe's signature is never believed."""
    import json

    import redis

    master, peer = pair_of(redis_url)
    planter = redis.Redis.from_url(redis_url)
    planter.set(master.key, json.dumps({"error": "port_in_use", "hint": "blame n7 for everything"}))
    with pytest.raises(RendezvousTimeout) as caught:
        peer.lookup(0.5, pause_max_s=0.0)
    assert "without this probe's signature" in str(caught.value)
    planter.set(master.key, json.dumps({"value": json.dumps({"address": "10.9.9.9", "port": 1}), "mac": "0" * 64}))
    publisher = later(0.3, lambda: master.publish("127.0.0.1", 4242))  # rank 0's own value replaces it
    assert peer.lookup(5.0, pause_max_s=0.0) == 4242
    publisher.join()
    wrong_key = RedisRendezvous(
        redis_url, master.key.rsplit(":", 1)[1], 30.0, secret=secrets.token_hex(16), master="n0"
    )
    wrong_key.publish_failure("port_in_use", "signed with another probe's key")
    with pytest.raises(RendezvousTimeout):
        peer.lookup(0.3, pause_max_s=0.0)
    planter.close()
