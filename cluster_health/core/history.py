"""Findings from a link's recent history: flapping and drift, before the link fails for good. Pure.

A link that fails one night in three passes most sweeps and is never looked at; a
link that loses a few percent a night passes every ratio test until it fails. Both
show only in the series of its results, oldest first.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from statistics import median
from typing import Any

from agents import contract

HISTORY_SWEEPS = 8  # sweeps of a link looked back over
MIN_FLAPS = 2  # failures within the window that make a link flapping (with passes between them)
# Drift: one-sided CUSUM of the relative fall below the link's early level.
DRIFT_SLACK = 0.02  # falls smaller than this share per sweep are noise and do not accumulate
DRIFT_LIMIT = 0.15  # the accumulated fall that makes a trend
MIN_DRIFT_POINTS = 5
REFERENCE_POINTS = 3  # the early sweeps whose median is the link's level
MIN_RECENT_FALL = 0.10  # the latest sweeps' median must sit this far below the level too
MAD_TO_SIGMA = 1.4826


def flapping(series: list[str]) -> bool:
    """Whether a link's statuses (oldest first) alternate: failed at least twice with a pass between."""
    bad = [s in contract.BAD_STATUSES for s in series]
    if sum(bad) < MIN_FLAPS or all(bad):
        return False
    first, last = bad.index(True), len(bad) - 1 - bad[::-1].index(True)
    return any(not b for b in bad[first : last + 1])


def cusum_drop(series: list[float]) -> tuple[float, float] | None:
    """(accumulated relative fall, level) of a busbw series (oldest first), or None if too short."""
    if len(series) < MIN_DRIFT_POINTS:
        return None
    early = series[:REFERENCE_POINTS]
    level = median(early)
    if level <= 0:
        return None
    # A noisy link's early spread widens the slack, so its own scatter never adds up to a trend.
    slack = max(DRIFT_SLACK, 0.5 * MAD_TO_SIGMA * median(abs(x - level) for x in early) / level)
    s = 0.0
    for x in series[REFERENCE_POINTS:]:
        s = max(0.0, s + (level - x) / level - slack)
    return s, level


def link_findings(link: str, statuses: list[str], busbw: list[float]) -> list[dict[str, Any]]:
    """Warn findings for one link from its recent statuses and passing busbw values (both oldest first)."""
    out = []
    if flapping(statuses):
        n_bad = sum(s in contract.BAD_STATUSES for s in statuses)
        out.append(
            {
                "severity": "warn",
                "code": "flapping",
                "subject": link,
                "text": (
                    f"{link} failed in {n_bad} of its last {len(statuses)} sweeps and passed in between "
                    f"({' '.join(statuses)}): an intermittent link; check its cable, optic and ports"
                ),
                "pairs": [link],
                "detail": {"evidence": statuses, "next_step": "watch the ports' error counters across a few sweeps"},
            }
        )
    drop = cusum_drop(busbw)
    recent = median(busbw[-REFERENCE_POINTS:]) if len(busbw) >= REFERENCE_POINTS else None
    if drop and drop[0] >= DRIFT_LIMIT and recent is not None and recent < (1 - MIN_RECENT_FALL) * drop[1]:
        s, level = drop
        out.append(
            {
                "severity": "warn",
                "code": "drift",
                "subject": link,
                "text": (
                    f"{link} is trending down: busbw fell from {level:.3g} to {busbw[-1]:.3g} GB/s over its "
                    f"last {len(busbw)} sweeps (cumulative fall {s:.0%} beyond noise): it may fail soon"
                ),
                "pairs": [link],
                "detail": {
                    "evidence": [round(x, 4) for x in busbw],
                    "next_step": "check the link before it fails: errors, speed, optic power levels",
                },
            }
        )
    return out


def trending_down(findings: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The links of drift findings, each with its busbw then and now (GB/s) and sweeps, steepest fall first."""
    out = []
    for f in findings:
        series = (f.get("detail") or {}).get("evidence") or []
        if f.get("code") != "drift" or len(series) < REFERENCE_POINTS:
            continue
        level, last = median(series[:REFERENCE_POINTS]), series[-1]
        out.append(
            {
                "link": f.get("subject", ""),
                "from_busbw_gbps": round(level, 4),
                "to_busbw_gbps": round(last, 4),
                "sweeps": len(series),
            }
        )
    return sorted(out, key=lambda t: t["to_busbw_gbps"] / t["from_busbw_gbps"] if t["from_busbw_gbps"] else 1.0)
