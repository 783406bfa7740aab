"""Each way a rendezvous fails ends in a bounded result that names the stage, the reason and the address."""

import time

import pytest

from agents.runner import run_probe
from devtools.services import free_port
from tests.support.agent_fixtures import command, held_port, pair


def assert_named(result, status, stage, reason, *in_hint):
    """The result ends ``status`` at ``stage`` for ``reason``, and its hint names each of ``in_hint``."""
    assert (result["status"], result["stage"], result["reason"]) == (status, stage, reason), result
    for text in in_hint:
        assert text in result["hint"], result["hint"]


@pytest.mark.timeout(30)
def test_it_reports_an_unknown_host_as_dns():
    result = run_probe(command(1, master_address="no-such-host.invalid"), port=29500)
    assert_named(result, "failed", "resolve", "dns", "no-such-host.invalid")


@pytest.mark.timeout(30)
def test_it_reports_nothing_listening_as_refused():
    port = free_port()
    result = run_probe(command(1, timeouts={"connect": 0.5}), port=port)
    assert_named(result, "failed", "connect", "refused", f"127.0.0.1:{port}", "n0")


@pytest.mark.timeout(30)
def test_it_reports_a_peer_that_never_arrives_within_the_deadline(redis_url):
    cmd = command(1, timeouts={"store": 2.0}, deadline_s=8.0)
    began = time.monotonic()
    result = run_probe(cmd, redis_url)
    assert time.monotonic() - began < cmd["deadline_s"] + 2
    assert_named(result, "timeout", "store", "store_timeout", "n0")


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    "fields, named, in_hint",
    [
        ({"timeouts": {"store": 1.5}, "deadline_s": 6.0}, ("timeout", "store", "store_timeout"), ["n1 (rank 1)"]),
        ({"bind_address": "192.0.2.254"}, ("failed", "resolve", "interface_missing"), ["192.0.2.254", "127.0.0.1"]),
    ],
    ids=["the_master_reports_a_peer_that_never_joins_its_store", "an_address_this_host_does_not_own"],
)
def test_rank_0_alone_names_what_went_wrong(redis_url, fields, named, in_hint):
    assert_named(run_probe(command(0, **fields), redis_url), *named, *in_hint)


@pytest.mark.timeout(60)
def test_it_reports_a_taken_port_on_both_ranks(redis_url):
    with held_port() as port:
        r0, r1 = pair(redis_url, master_port=port)
    for result in (r0, r1):
        assert (result["status"], result["reason"]) == ("failed", "port_in_use"), result
        assert str(port) in result["hint"]
    assert r0["stage"] == "connect"
    assert "pytest" in r0["hint"] or "python" in r0["hint"]  # who holds it, from /proc


@pytest.mark.timeout(60)
def test_nccl_without_cuda_is_backend_unavailable(redis_url):
    for result in pair(redis_url, backend="nccl"):
        assert_named(result, "failed", "init", "backend_unavailable", "CUDA")
