"""A pair's evidence from its halves, and the gray failures named from it (cluster_health.core.evidence)."""

from agents import evidence as agent_evidence
from cluster_health.core import evidence, expected_busbw, merge


def half(node, rank, status="ok", stage="bandwidth", reason=None, **ev):
    return {
        "node": node,
        "rank": rank,
        "status": status,
        "stage": stage,
        "reason": reason,
        "hint": None,
        "evidence": {"node": node, "rank": rank, **ev},
    }


def stalled(node, rank, **ev):
    """A half that timed out in its bandwidth stage with 64 KiB in flight, after 1 KiB had passed."""
    return half(
        node, rank, "timeout", "bandwidth", "collective_timeout", largest_ok_bytes=1024, size_in_flight=65536, **ev
    )


# One socket to the peer as /proc/net/tcp shows it: data queued, retransmitting.
STUCK = [
    {
        "local": "198.18.0.10:4000",
        "remote": "198.18.0.11:5000",
        "state": "established",
        "tx_queue": 30000,
        "rx_queue": 0,
        "timer": "retransmit",
        "retransmits": 5,
    }
]


def test_a_timeout_after_small_sizes_passed_with_bytes_retransmitted_is_a_size_stall():
    a = stalled("A", 0, mtu=9000, sockets=STUCK, store={"role": "listen", "connected": True})
    b = stalled("B", 1, mtu=1500, store={"role": "connect", "connected": True})
    m = merge.merge_halves(a, b)
    assert (m["status"], m["reason"]) == ("timeout", "size_stall")
    assert m["hint"].startswith("transfers of 64 KiB and more stall between A (MTU 9000) and B (MTU 1500)")
    assert "align the MTU on the path" in m["hint"]
    assert m["evidence"]["connections"][0] == {"from": "B", "to": "A", "step": "store", "ok": True}


def test_a_stopped_peer_is_no_size_stall():
    assert merge.merge_halves(stalled("A", 0), stalled("B", 1))["reason"] == "collective_timeout"


def test_a_passing_pair_that_retransmits_is_degraded_lossy():
    tcp = {"OutSegs": 2000, "RetransSegs": 90, "retrans_pct": 4.5}
    m = merge.merge_halves(half("A", 0, tcp=tcp), half("B", 1))
    judged = evidence.lossy(m, m["evidence"])
    assert (judged["status"], judged["reason"]) == ("degraded", "lossy")
    assert judged["hint"].startswith("A retransmitted 4.5 % of its 2000 segments")


def test_counters_and_sockets_are_read_from_the_kernel_files(tmp_path):
    snmp = tmp_path / "snmp"
    snmp.write_text("Tcp: RtoAlgorithm OutSegs RetransSegs OutRsts InErrs\nTcp: 1 100 3 1 0\n")
    before = agent_evidence.tcp_counters(str(snmp))
    snmp.write_text("Tcp: RtoAlgorithm OutSegs RetransSegs OutRsts InErrs\nTcp: 1 300 7 1 0\n")
    delta = agent_evidence.tcp_delta(before, agent_evidence.tcp_counters(str(snmp)))
    assert delta == {"OutSegs": 200, "RetransSegs": 4, "InErrs": 0, "OutRsts": 0, "retrans_pct": 2.0}
    table = tmp_path / "tcp"
    table.write_text(
        "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n"
        "   0: 0A0012C6:0FA0 0B0012C6:1388 01 00007530:00000000 01:00000010 00000005  0 0 1 1\n"
        "   1: 0A0012C6:0FA1 0B0012C6:1389 01 00000000:00000000 00:00000000 00000000  0 0 2 1\n"
    )
    assert agent_evidence.peer_sockets("198.18.0.11", str(table)) == STUCK


def test_a_link_is_judged_by_its_own_noise_where_history_exists():
    # A sweep named as the baseline: the fixed ratio. A rolling median of 4 or more clean figures: the median
    # less the larger of 4 robust sigmas and 20 %. A younger rolling median judges nothing (its peers do).
    assert expected_busbw.threshold(1.0, None, 1, 0.9) == 0.9
    assert round(expected_busbw.threshold(1.0, 0.1, 5, 0.9), 4) == round(1.0 - 4 * 1.4826 * 0.1, 4)
    assert expected_busbw.threshold(1.0, 0.0, 5, 0.9) == 0.8
    assert expected_busbw.threshold(1.0, 0.0, 3, 0.9) is None
    mid, mad = expected_busbw.median_and_mad([1.0, 1.2, 0.8, 1.1, 5.0])
    assert (mid, round(mad, 6)) == (1.1, 0.1)


def test_the_load_beside_a_probe_is_read_from_the_interface_and_cpu_counters(tmp_path):
    dev, stat = tmp_path / "dev", tmp_path / "stat"
    head = "Inter-|   Receive ...\n face |bytes packets errs drop fifo frame compressed multicast|bytes ...\n"

    def write(rx, tx, busy, idle, steal):
        dev.write_text(
            head + f"  eth0: {rx} 0 0 0 0 0 0 0 {tx} 0 0 0 0 0 0 0\n    lo: 5 0 0 0 0 0 0 0 5 0 0 0 0 0 0 0\n"
        )
        stat.write_text(f"cpu  {busy} 0 0 {idle} 0 0 0 {steal} 0 0\ncpu0 1 2 3 4 5 6 7 8\n")

    write(1_000, 2_000, 100, 100, 0)
    before = agent_evidence.load_snapshot("eth0", str(dev), str(stat))
    assert before["nic"] == 3_000 and before["cpu"] == (200, 100, 0)
    write(1_000 + 3_000_000_000, 2_000 + 1_000_000_000, 1_000, 120, 30)
    after = {**agent_evidence.load_snapshot("eth0", str(dev), str(stat)), "t": before["t"] + 2.0}
    load = agent_evidence.load_delta(before, after, own_bytes=2_000_000_000)
    assert load["nic_bytes"] == 4_000_000_000 and load["own_bytes"] == 2_000_000_000
    assert load["other_gbps"] == 1.0  # 2 GB that were not the probe's, in 2 s
    assert load["cpu_steal"] == round(30 / 950, 3) and 0 <= load["cpu_other"] <= 1
    assert agent_evidence.nic_bytes("eth9", str(dev)) is None and agent_evidence.nic_bytes(None) is None
