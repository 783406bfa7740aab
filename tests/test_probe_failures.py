"""Each way a rendezvous fails ends in a bounded result that names the stage, the reason and the address."""

import time

import pytest

from agents.runner import run_probe
from devtools.services import free_port
from tests.agent_fixtures import command, held_port, pair


@pytest.mark.timeout(30)
def test_it_reports_an_unknown_host_as_dns():
    result = run_probe(command(1, master_address="no-such-host.invalid"), port=29500)
    assert (result["status"], result["stage"], result["reason"]) == ("failed", "resolve", "dns")
    assert "no-such-host.invalid" in result["hint"]


@pytest.mark.timeout(30)
def test_it_reports_nothing_listening_as_refused():
    port = free_port()
    result = run_probe(command(1, timeouts={"connect": 0.5}), port=port)
    assert (result["status"], result["stage"], result["reason"]) == ("failed", "connect", "refused")
    assert f"127.0.0.1:{port}" in result["hint"] and "n0" in result["hint"]


@pytest.mark.timeout(30)
def test_it_reports_a_peer_that_never_arrives_within_the_deadline(redis_url):
    cmd = command(1, timeouts={"store": 2.0}, deadline_s=8.0)
    began = time.monotonic()
    result = run_probe(cmd, redis_url)
    assert time.monotonic() - began < cmd["deadline_s"] + 2
    assert (result["status"], result["stage"], result["reason"]) == ("timeout", "store", "store_timeout")
    assert "n0" in result["hint"]


@pytest.mark.timeout(30)
def test_the_master_reports_a_peer_that_never_joins_its_store(redis_url):
    result = run_probe(command(0, timeouts={"store": 1.5}, deadline_s=6.0), redis_url)
    assert (result["status"], result["stage"], result["reason"]) == ("timeout", "store", "store_timeout")
    assert "n1 (rank 1)" in result["hint"]


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
        assert (result["status"], result["stage"], result["reason"]) == ("failed", "init", "backend_unavailable")
        assert "CUDA" in result["hint"]


@pytest.mark.timeout(60)
def test_a_probe_address_this_host_does_not_own_is_interface_missing(redis_url):
    result = run_probe(command(0, bind_address="192.0.2.254"), redis_url)
    assert (result["status"], result["stage"], result["reason"]) == ("failed", "resolve", "interface_missing")
    assert "192.0.2.254" in result["hint"] and "127.0.0.1" in result["hint"]
