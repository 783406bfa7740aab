"""Interface discovery: every candidate interface combination of a pair is tried and reported."""

import pytest

from tests.support.agent_fixtures import pair


@pytest.mark.timeout(60)
def test_it_reports_which_interface_combinations_work(redis_url):
    for result in pair(redis_url, kind="discover"):
        assert result["status"] == "ok", result["hint"]
        rows = result["extra"]["interfaces"]
        assert {(r["rank0_interface"], r["rank1_interface"]) for r in rows} == {("lo", "lo")}
        assert all(r["ok"] for r in rows)
        assert "GLOO_SOCKET_IFNAME=lo" in result["hint"] and "NCCL_SOCKET_IFNAME=lo" in result["hint"]
