"""Preflight: a job's own rendezvous (its MASTER_PORT, its launch variables) rehearsed before it runs."""

import pytest

from devtools.services import free_port
from tests.support.agent_fixtures import pair


@pytest.mark.timeout(60)
def test_it_passes_a_job_whose_rendezvous_works(redis_url):
    port = free_port()
    for result in pair(redis_url, kind="preflight", master_port=port, last_stage="collective"):
        assert result["status"] == "ok", result["hint"]
        assert "gloo_default" in result["extra"]
    assert result["stage"] == "collective"


@pytest.mark.timeout(60)
def test_an_interface_variable_naming_a_missing_nic_is_interface_missing(redis_url):
    r0, r1 = pair(redis_url, kind="preflight", master_port=free_port(), env={"GLOO_SOCKET_IFNAME": "nope0"})
    for result in (r0, r1):
        assert (result["status"], result["stage"], result["reason"]) == ("failed", "init", "interface_missing")
        assert "GLOO_SOCKET_IFNAME=nope0" in result["hint"] and "lo" in result["hint"]
