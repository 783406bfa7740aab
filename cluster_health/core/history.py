"""Findings from recent history: flapping, drift and repeat offenders, before a link or node fails for good. Pure.

A link that fails one night in three passes most sweeps and is never looked at; a
link that loses a few percent a night passes every ratio test until it fails. Both
show only in the series of its results, oldest first.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import date, timedelta
from statistics import median
from typing import Any

from cluster_health import vocabulary

HISTORY_SWEEPS = 8  # sweeps of a link looked back over
MIN_FLAPS = 2  # failures within the window that make a link flapping (with passes between them) ...
# ... as a warning from this many on: a link that failed twice in eight sweeps with passes between may
# have had two faults, each repaired (a node's fault fails its links too); a third is a pattern.
WARN_FLAPS = 3
MIN_TRANSIENT_SWEEPS = 3  # sweeps within the window in which a node came out transient before it is named flapping
# ... as a warning only when that is nearly every sweep of a full window: on a loaded healthy bed the busiest
# host comes out transient in up to 5 of 8 nightly sweeps (benchmarks/false_alarms.py), which is noted, not raised.
WARN_TRANSIENT_SWEEPS = 6
# Drift: a robust trend line (Theil-Sen) through the link's busbw, judged against the link's own scatter.
MIN_DRIFT_POINTS = 5
REFERENCE_POINTS = 3  # the early sweeps whose median is the link's level
TREND_NOISE_K = 4.0  # the fitted fall must be this many robust standard deviations of the link's scatter
MIN_TREND_FALL = 0.15  # and at least this share of the level: smaller falls are not worth a night's look
MIN_RECENT_FALL = 0.10  # the latest two sweeps, and the median of the last three, sit this far below the level
MAD_TO_SIGMA = 1.4826


def flapping(series: list[str]) -> bool:
    """Whether a link's statuses (oldest first) alternate: failed at least twice with a pass between."""
    bad = [s in vocabulary.BAD_STATUSES for s in series]
    if sum(bad) < MIN_FLAPS or all(bad):
        return False
    first, last = bad.index(True), len(bad) - 1 - bad[::-1].index(True)
    return any(not b for b in bad[first : last + 1])


def transient_nodes(per_sweep: list[Iterable[tuple[str, str]]]) -> list[dict[str, Any]]:
    """Warn findings for nodes that come out ``transient`` sweep after sweep: flapping, named though never acted on.

    ``per_sweep``: each sweep's transient pairs (oldest first, this one last). A node is named when
    it is in a transient pair in at least MIN_TRANSIENT_SWEEPS of them and in more sweeps than any
    of its partners there (the node common to them, not each peer it met): an ``info`` finding,
    a ``warn`` from WARN_TRANSIENT_SWEEPS on. Never a failure: nothing is drained for it.
    """
    seen: dict[str, int] = {}
    partners: dict[str, set[str]] = {}
    for pairs in per_sweep:
        nodes: set[str] = set()
        for a, b in pairs:
            nodes |= {a, b}
            partners.setdefault(a, set()).add(b)
            partners.setdefault(b, set()).add(a)
        for n in nodes:
            seen[n] = seen.get(n, 0) + 1
    out: list[dict[str, Any]] = []
    for node, count in sorted(seen.items()):
        if count < MIN_TRANSIENT_SWEEPS or any(seen[p] >= count for p in partners[node]):
            continue
        out.append(
            {
                "severity": "warn" if count >= WARN_TRANSIENT_SWEEPS else "info",
                "code": "flapping",
                "subject": node,
                "text": (
                    f"{node} came out transient in {count} of the last {len(per_sweep)} sweeps (bad once, fine when "
                    f"probed again, with {', '.join(sorted(partners[node])[:8])}): never acted on, but it keeps "
                    "happening; check its NIC, cable and what else runs on it"
                ),
                "pairs": [],
                "detail": {"evidence": [count, len(per_sweep)], "next_step": "watch its NIC counters across sweeps"},
            }
        )
    return out


def blamed_subjects(
    failing: Iterable[tuple[str, Iterable[str] | None]],
    names: set[str],
    confirmed: set[tuple[str, str]],
    local: bool = False,
) -> set[str]:
    """The nodes and links a sweep's fail findings blame on confirmed evidence, each link as "a<->b" (sorted names).

    ``failing``: each fail finding's subject and the pairs it lists ("a<->b"); ``names``: the sweep's
    nodes; ``confirmed``: the pairs (sorted names) its confirmation pass saw bad again; ``local``: a gpu
    sweep, whose nodes' own checks confirm every finding. The rule Slurm drains by
    (cluster_health/actions/blame.py): a node with a confirmed pair of its own, among those the
    finding lists where it lists any; a link confirmed itself. Subjects that are neither (a group,
    the cluster) blame no node here.
    """
    out: set[str] = set()
    for subject, listed in failing:
        ends = tuple(sorted(subject.split("<->")))
        if subject in names:
            evidence = {k for k in confirmed if subject in k}
        elif len(ends) == 2 and all(n in names for n in ends):
            evidence = {ends} & confirmed
        else:
            continue
        support = {tuple(sorted(p.split("<->"))) for p in listed or ()}
        if support:
            evidence &= support
        if local or evidence:
            out.add(subject if subject in names else "<->".join(ends))
    return out


def repeat_offenders(
    per_sweep: Iterable[tuple[int, date, set[str]]], k: int, days: int, today: date
) -> list[dict[str, Any]]:
    """Warn findings for nodes and links blamed on at least ``k`` of the last ``days`` calendar days (today
    included), passing or not between.

    ``per_sweep``: each sweep's id, the day it finished and what it blamed (``blamed_subjects``); sweeps
    outside the window are left out. Days, not sweeps: an hourly idle sweep or a gang check before each
    job seeing the same fault ten times in one afternoon is one bad day, and a node that fails once a
    week is still seen when a hundred sweeps ran between. A link is left out where one of its ends is
    a repeat offender itself: the node explains it. Never a failure: nothing is drained for it, a fault
    found again is what acts.
    """
    first = today - timedelta(days=days - 1)
    hits: dict[str, dict[date, list[int]]] = {}
    for sweep_id, day, subjects in per_sweep:
        if first <= day <= today:
            for subject in subjects:
                hits.setdefault(subject, {}).setdefault(day, []).append(sweep_id)
    offenders = {s: by_day for s, by_day in hits.items() if len(by_day) >= k}
    nodes = {s for s in offenders if "<->" not in s}
    out: list[dict[str, Any]] = []
    for subject, by_day in sorted(offenders.items(), key=lambda item: ("<->" in item[0], item[0])):
        link = "<->" in subject
        if link and nodes & set(subject.split("<->")):
            continue
        on = sorted(by_day)
        listed = "; ".join(f"{d.isoformat()} " + ", ".join(f"#{i}" for i in sorted(by_day[d])) for d in on)
        what, check = ("failed", "its cable, optic and ports") if link else ("was blamed", "its hardware")
        out.append(
            {
                "severity": "warn",
                "code": "repeat_offender",
                "subject": subject,
                "text": (
                    f"{subject} {what} on {len(on)} of the last {days} days ({listed}): a repeat "
                    f"offender; check {check} before returning it to service"
                ),
                "pairs": [subject] if link else [],
                "detail": {
                    "evidence": [
                        f"{what} on {d.isoformat()} in sweep " + ", ".join(f"#{i}" for i in sorted(by_day[d]))
                        for d in on
                    ],
                    "blamed": len(on),
                    "window": days,
                    "days": [d.isoformat() for d in on],
                    "sweeps": sorted(i for d in on for i in by_day[d]),
                    "next_step": f"check {check}: repaired once, it came back",
                },
            }
        )
    return out


def trend_fall(series: list[float]) -> tuple[float, float, float] | None:
    """(fitted fall, level, scatter) of a busbw series (oldest first), or None if too short.

    The fall is what the Theil-Sen line (the median of the pairwise slopes) loses over the
    series; the scatter a robust standard deviation of the link's own noise, the larger of
    the residuals' about that line and the sweep-to-sweep steps' (a short series' estimate
    from one alone runs low). A busy host's sweeps scatter a link's busbw by a fifth either
    way: a single low sweep, or a cluster of them, is not a trend.
    """
    if len(series) < MIN_DRIFT_POINTS:
        return None
    level = median(series[:REFERENCE_POINTS])
    if level <= 0:
        return None
    n = len(series)
    slope = median((series[j] - series[i]) / (j - i) for i in range(n) for j in range(i + 1, n))
    intercept = median(x - slope * i for i, x in enumerate(series))
    residuals = [abs(x - intercept - slope * i) for i, x in enumerate(series)]
    steps = [b - a for a, b in zip(series, series[1:])]
    step_mid = median(steps)
    scatter = MAD_TO_SIGMA * max(median(residuals), median(abs(d - step_mid) for d in steps) / 2**0.5)
    return -slope * (n - 1), level, scatter


def drifting(series: list[float]) -> tuple[float, float, float] | None:
    """The trend_fall of a busbw series (oldest first) that falls as a trend: beyond the link's noise, by a share
    worth a look, and still down at its latest two sweeps; else None."""
    found = trend_fall(series)
    if found is None:
        return None
    fall, level, scatter = found
    floor = (1 - MIN_RECENT_FALL) * level
    steady = fall >= TREND_NOISE_K * scatter and fall >= MIN_TREND_FALL * level
    still_down = max(series[-2:]) < floor and median(series[-REFERENCE_POINTS:]) < floor
    return found if steady and still_down else None


def link_findings(
    link: str, statuses: list[str], busbw: list[float], relative: list[float] | None = None
) -> list[dict[str, Any]]:
    """Findings for one link from its recent statuses and passing busbw values (both oldest first).

    ``relative``: the same busbw values, each as a share of its own sweep's median link (the link
    next to its peers of the same moment), where every sweep had peers to compare with. A drift is
    named only where both fall: a whole fleet slowed by load, or a changed test bed, falls in
    busbw alone, and is no link's trend.
    """
    out: list[dict[str, Any]] = []
    if flapping(statuses):
        n_bad = sum(s in vocabulary.BAD_STATUSES for s in statuses)
        out.append(
            {
                "severity": "warn" if n_bad >= WARN_FLAPS else "info",
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
    trend = drifting(busbw)
    if trend and relative is not None and len(relative) == len(busbw) and drifting(relative) is None:
        trend = None  # its peers fell alike: the conditions changed, not the link
    if trend:
        fall, level, scatter = trend
        out.append(
            {
                "severity": "warn",
                "code": "drift",
                "subject": link,
                "text": (
                    f"{link} is trending down: busbw fell from {level:.3g} to {busbw[-1]:.3g} GB/s over its "
                    f"last {len(busbw)} sweeps, a steady fall of {fall / level:.0%} against a sweep-to-sweep scatter of "
                    f"{scatter / level:.0%}: it may fail soon"
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
