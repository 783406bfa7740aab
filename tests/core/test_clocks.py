"""Clock skew findings: the odd node named with how far off it is, the server named when it is the odd one."""

from cluster_health.core.clocks import clock_findings


def test_it_names_a_node_whose_clock_is_ahead_and_says_what_follows():
    (f,) = clock_findings({"gpu-017": 42.4, "gpu-018": 0.2, "gpu-019": -0.4}, tolerance_s=5, window_s=300)
    assert (f["severity"], f["code"], f["subject"]) == ("warn", "clock_skew", "gpu-017")
    assert f["text"].startswith("gpu-017's clock is 42 s ahead of the server's") and "fix NTP on gpu-017" in f["text"]


def test_past_half_the_signature_window_it_says_the_node_will_look_offline():
    (f,) = clock_findings({"n0": -200.0, "n1": 0.0, "n2": 0.1}, tolerance_s=5, window_s=300)
    assert "200 s behind" in f["text"] and "refused as stale" in f["text"]


def test_when_the_whole_fleet_disagrees_with_the_server_the_server_is_named_not_the_fleet():
    found = clock_findings({f"n{i}": 61.0 + i * 0.1 for i in range(6)} | {"odd": 130.0}, tolerance_s=5, window_s=300)
    assert [f["subject"] for f in found] == ["server", "odd"]
    assert "the server's clock is 61 s behind the clocks of most nodes" in found[0]["text"]
    assert "69 s ahead of the fleet's" in found[1]["text"]


def test_clocks_within_the_tolerance_or_unknown_say_nothing():
    assert clock_findings({"n0": 4.9, "n1": -4.9, "n2": None}, tolerance_s=5, window_s=300) == []
    assert clock_findings({}, tolerance_s=5, window_s=300) == []
