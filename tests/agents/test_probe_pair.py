"""A good pair (and group) over loopback: every stage passes and every size gets a bandwidth."""

import pytest

from agents import contract
from tests.support.agent_fixtures import SMALL_SIZES, command, pair, run_ranks


@pytest.mark.timeout(60)
def test_it_measures_busbw_at_every_size(redis_url):
    for result in pair(redis_url):
        assert result["status"] == "ok", result["hint"]
        assert result["stage"] == "bandwidth"
        assert result["reason"] is None
        assert result["interface"] == "lo"
        assert [s["bytes"] for s in result["sizes"]] == SMALL_SIZES
        for size in result["sizes"]:
            assert size["ok"] and size["busbw_gbps"] > 0 and size["time_us"] > 0
            # two ranks: busbw = algbw * 2(n-1)/n = algbw
            assert size["busbw_gbps"] == pytest.approx(size["algbw_gbps"] * contract.busbw_factor(2), rel=1e-3)
        assert result["busbw_gbps"] == result["sizes"][-1]["busbw_gbps"]
        # What else the host did while it measured: the interface's other bytes, other work on the CPUs.
        load = result["evidence"]["load"]
        assert load["seconds"] > 0 and load["own_bytes"] > 0 and 0 <= load["cpu_other"] <= 1
        assert 0 < result["latency_us_p50"] <= result["latency_us_p99"]
        assert set(result["timings"]) >= {"spawn_s", "import_s", "rendezvous_s", "collectives_s"}
        assert result["versions"]["torch"] == result["peer_versions"]["torch"]
        assert not result["extra"].get("version_mismatch")


@pytest.mark.timeout(60)
def test_it_runs_collectives_on_two_groups_at_once(redis_url):
    for result in pair(redis_url, multi_group=True, last_stage="collective"):
        assert result["status"] == "ok", result["hint"]
        assert result["stage"] == "collective"
        assert result["sizes"] == []


@pytest.mark.timeout(90)
def test_it_probes_a_group_of_three(redis_url):
    rdv = "group3-" + "x" * 8
    peers = [{"name": f"n{r}", "address": "127.0.0.1"} for r in range(3)]
    commands = [command(r, rdv, kind="group", world_size=3, peers=peers, sizes=[4096, 65536]) for r in range(3)]
    for result in run_ranks(commands, redis_url):
        assert result["status"] == "ok", result["hint"]
        size = result["sizes"][-1]
        assert size["busbw_gbps"] == pytest.approx(size["algbw_gbps"] * 4 / 3, rel=1e-3)


@pytest.mark.timeout(60)
def test_it_stops_growing_sizes_before_the_bandwidth_budget_runs_out(redis_url):
    sizes = [1024 * 4**k for k in range(9)]  # 1 KiB .. 64 MiB
    timeouts = {"bandwidth": 0.3}
    for result in pair(redis_url, sizes=sizes, iterations=10, warmup=2, timeouts=timeouts):
        assert result["status"] == "ok", result["hint"]
        ran, skipped = result["extra"]["sizes_run"], result["extra"]["sizes_skipped"]
        assert ran and skipped and 64 * 2**20 in skipped
        assert ran + skipped == sizes  # the ranks agreed: the same prefix ran on both
        assert [s["bytes"] for s in result["sizes"]] == ran
        assert result["busbw_gbps"] == result["sizes"][-1]["busbw_gbps"] > 0
        assert result["stage_times"]["bandwidth"] < 0.3 + 1.0
