"""A busy host's scatter is no slow link and no trend: the baseline and drift rules against measured noise.

The series below are busbw values (GB/s) that links of a healthy four-host namespace bed
reached in nightly sweeps with every core busy (benchmarks/false_alarms.py): each link
scatters by a fifth either way from one sweep to the next.
"""

from __future__ import annotations

import pytest

from cluster_health.core import expected_busbw, history

RATIO = 0.9  # CLUSTER_HEALTH_DEGRADED_RATIO's default


@pytest.mark.parametrize(
    "busbw, usual, mad, samples",
    [
        (0.343, 0.396, 0.0071, 5),  # 13 % under a quiet link's median of five sweeps
        (0.312, 0.366, 0.0065, 5),  # 15 % under
    ],
)
def test_a_loaded_hosts_scatter_is_not_below_its_rolling_baseline(busbw, usual, mad, samples):
    assert busbw >= expected_busbw.threshold(usual, mad, samples, RATIO)


@pytest.mark.parametrize(
    "usual, mad, samples",
    [
        (0.395, 0.0, 1),  # a rolling median of one sweep (a 0.39 then 0.64 GB/s link was called transient)
        (0.436, 0.01, 2),  # of two
        (0.436, 0.01, 3),  # of three
    ],
)
def test_a_rolling_baseline_too_young_to_know_its_spread_judges_nothing(usual, mad, samples):
    assert expected_busbw.threshold(usual, mad, samples, RATIO) is None


@pytest.mark.parametrize(
    "busbw, usual, mad, samples",
    [
        (0.29, 0.396, 0.0071, 5),  # 27 % under a link that never moves
        (0.30, 0.40, 0.01, 4),  # 25 % under a link with four clean figures
        (0.20, 0.40, 0.02, 5),  # half: beyond a noisy link's band (4 robust sigma: 30 %)
    ],
)
def test_a_link_that_lost_a_quarter_is_below_its_rolling_baseline(busbw, usual, mad, samples):
    assert busbw < expected_busbw.threshold(usual, mad, samples, RATIO)
    assert "by more than" in expected_busbw.slow_text(busbw, usual, mad, samples, RATIO)


def test_a_baseline_sweep_named_by_hand_keeps_the_configured_ratio():
    assert expected_busbw.threshold(0.40, None, 1, RATIO) == pytest.approx(0.36)
    assert "below 0.9 x the baseline 0.4 GB/s" in expected_busbw.slow_text(0.35, 0.40, None, 1, RATIO)


@pytest.mark.parametrize(
    "series",
    [
        [0.467, 0.452, 0.48, 0.41, 0.47, 0.39, 0.43, 0.335],  # one low sweep at the end
        [0.474, 0.479, 0.46, 0.41, 0.38, 0.36, 0.40, 0.547],  # low for a while, then back
        [0.523, 0.50, 0.46, 0.52, 0.41, 0.47, 0.38, 0.433],  # scattered by a fifth
        [0.39, 0.41, 0.37, 0.36, 0.40, 0.35, 0.37, 0.349],  # a few percent under, within its noise
    ],
)
def test_a_loaded_hosts_scatter_is_no_trend(series):
    assert history.drifting(series) is None
    assert [f["code"] for f in history.link_findings("a<->b", ["ok"] * len(series), series)] == []


def test_a_link_losing_a_few_percent_a_night_is_trending_down():
    series = [1.0, 1.01, 0.99, 0.96, 0.93, 0.9, 0.87, 0.84]
    fall, level, scatter = history.drifting(series) or (0.0, 0.0, 0.0)
    assert level == 1.0 and fall == pytest.approx(0.21, abs=0.02) and scatter < 0.02
    (finding,) = history.link_findings("a<->b", ["ok"] * len(series), series)
    assert finding["code"] == "drift" and "fell from 1 to 0.84 GB/s over its last 8 sweeps" in finding["text"]


def test_a_fall_its_peers_share_is_no_drift_of_the_link():
    # A bulk transfer started beside the bed: every link fell a third; this one no more than its peers.
    series = [0.19, 0.18, 0.19, 0.18, 0.15, 0.13, 0.12]
    assert history.drifting(series) is not None
    alike = [1.0, 0.98, 1.02, 1.0, 0.97, 1.01, 0.99]  # its busbw over its sweep's median link
    assert [f["code"] for f in history.link_findings("a<->b", ["ok"] * 7, series, alike)] == []
    alone = [1.0, 0.98, 1.02, 0.9, 0.8, 0.72, 0.65]  # it fell while its peers held
    assert [f["code"] for f in history.link_findings("a<->b", ["ok"] * 7, series, alone)] == ["drift"]


def test_a_link_that_failed_twice_with_passes_between_is_noted_and_three_times_raised():
    twice = history.link_findings("a<->b", ["ok", "timeout", "ok", "ok", "timeout", "ok"], [])
    assert [(f["code"], f["severity"]) for f in twice] == [("flapping", "info")]
    thrice = history.link_findings("a<->b", ["timeout", "ok", "timeout", "ok", "timeout", "ok"], [])
    assert [(f["code"], f["severity"]) for f in thrice] == [("flapping", "warn")]
