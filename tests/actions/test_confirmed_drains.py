"""Only confirmed failures drain: sweeps through the real lifecycle, findings and confirmation pass, then a real slurmctld.

The agents' side is played in-process (devtools/sweep_driver.py); the verdict, the pass,
the findings and the drains are the server's own code, and sinfo reads the drains back.
"""

from __future__ import annotations

import pytest

from cluster_health.actions import slurm
from cluster_health.models import Sweep
from cluster_health.shapes import documents
from devtools.sweep_driver import heartbeat, in_pass, pair_of, result_for
from tests.support.action_fixtures import SlurmCluster

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("memory_channel_layer")]
NODES = [f"n{i}" for i in range(1, 7)]
OWN_BYTES = 1_500_000_000  # the probe's own bytes on the interface during its bandwidth stage


@pytest.fixture
def slurmctld(tmp_path, monkeypatch, settings):
    cluster = SlurmCluster(tmp_path / "slurm", NODES).start()
    monkeypatch.setenv("SLURM_CONF", str(cluster.conf))
    settings.SLURM_NODE_MAP = ""
    try:
        yield cluster
    finally:
        cluster.stop()


def run_sweep(driver, reply) -> tuple[Sweep, dict]:
    for n in NODES:
        heartbeat(n)
    sweep = driver.sweep(kind="full", nodes=NODES)
    driver.answer_all(reply)
    sweep.refresh_from_db()
    assert sweep.status == "finished"
    return sweep, documents.sweep_json(sweep)


def drained(cluster) -> dict[str, str]:
    return {n: reason for n, (state, reason) in cluster.sinfo_states().items() if state.startswith("drain")}


def test_a_dead_link_seen_again_drains_both_its_ends_with_the_link_in_each_reason(driver, slurmctld):
    def reply(cmd):
        if pair_of(cmd) == {"n2", "n5"}:  # dead in the planned rounds and in the pass
            return result_for(cmd, status="timeout", stage="connect", reason="connect_timeout", hint="no answer")
        return result_for(cmd, busbw=1.0)

    sweep, report = run_sweep(driver, reply)
    [cell] = [p for p in report["pairs"] if {p["a"], p["b"]} == {"n2", "n5"}]
    assert cell["status"] == "timeout" and cell["evidence"]["confirmation"]["outcome"] == "confirmed"
    assert cell["evidence"]["confirmation"]["culprit"] == "n2<->n5"  # each side worked with a healthy partner
    assert report["verdict"] == "fail"
    assert sorted(slurm.act_on_sweep(sweep, "drain")) == ["drained n2", "drained n5"]
    reasons = drained(slurmctld)
    assert sorted(reasons) == ["n2", "n5"], reasons
    for reason in reasons.values():
        assert reason.startswith(f"cluster-health sweep #{sweep.pk}: n2<->n5 timeout at connect"), reason


def test_a_link_dead_once_and_fine_when_probed_again_drains_nothing(driver, slurmctld):
    def reply(cmd):
        if pair_of(cmd) == {"n2", "n5"} and not in_pass(cmd):
            return result_for(cmd, status="timeout", stage="connect", reason="connect_timeout", hint="no answer")
        return result_for(cmd, busbw=1.0)

    sweep, report = run_sweep(driver, reply)
    assert {p["status"] for p in report["pairs"] if {p["a"], p["b"]} == {"n2", "n5"}} == {"transient"}
    assert report["verdict"] == "pass"
    assert slurm.act_on_sweep(sweep, "drain") == [] and drained(slurmctld) == {}


def test_a_node_slowed_tenfold_and_slow_again_is_a_fail_that_drains_it_with_the_figures(driver, slurmctld):
    def reply(cmd):
        return result_for(cmd, busbw=0.1 if "n3" in pair_of(cmd) else 1.0 + cmd["probe_id"] % 3 / 50)

    sweep, report = run_sweep(driver, reply)
    [slow] = [f for f in report["findings"] if f["code"] == "slow_node"]
    assert (slow["severity"], slow["subject"]) == ("fail", "n3")
    assert "median busbw 0.1 GB/s" in slow["text"] and "slow again when probed again" in slow["text"], slow
    assert report["verdict"] == "fail"
    assert slurm.act_on_sweep(sweep, "drain") == ["drained n3"]
    reasons = drained(slurmctld)
    assert list(reasons) == ["n3"] and "median busbw 0.1 GB/s" in reasons["n3"], reasons


def test_a_node_slow_each_time_beside_a_network_hog_is_contended_and_drains_nothing(driver, slurmctld):
    def reply(cmd):
        if "n3" not in pair_of(cmd):
            return result_for(cmd, busbw=1.0 + cmd["probe_id"] % 3 / 50)
        # n3's interface carried 4 GB/s of someone else's traffic beside the probe's own, every time.
        other = 4.0 if cmd["node"] == "n3" else 0.0
        load = {"seconds": 3.0, "own_bytes": OWN_BYTES, "nic_bytes": OWN_BYTES + int(other * 3e9), "other_gbps": other}
        return result_for(cmd, busbw=0.1, evidence={"interface": "eth0", "load": load})

    sweep, report = run_sweep(driver, reply)
    mine = [p for p in report["pairs"] if "n3" in (p["a"], p["b"])]
    looked = [p for p in mine if p["evidence"].get("confirmation")]
    assert looked and {p["status"] for p in looked} == {"contended"}, mine
    assert all("n3 was busy (other traffic 4 GB/s" in p["hint"] for p in looked), looked
    assert not [f for f in report["findings"] if f["severity"] == "fail"], report["findings"]
    assert slurm.blamed_nodes(sweep) == {}
    assert slurm.act_on_sweep(sweep, "drain") == [] and drained(slurmctld) == {}
