"""Merging the two agents' halves of a pair probe into one result. Pure: no Django.

Each agent reports what it saw; the pair's result is the worse view: the worse
status, except that of two broken halves the one that stopped at the earlier
stage wins (it is the cause: the other side was left waiting for it, as a master
whose peer never arrives times out in `store` while the peer failed to `connect`).
Measurements take the pessimistic side too (the higher latency, the lower bandwidth).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, Literal, TypedDict

from agents import contract
from cluster_health import vocabulary
from cluster_health.core import evidence

STAGE_ORDER = {s: i for i, s in enumerate(contract.STAGES)}


class PairResult(TypedDict):
    """A pair's result, from the merge of its halves to its row: the keys are PairProbe's field names."""

    status: str
    stage: str | None
    reason: str | None
    hint: str | None
    latency_us_p50: float | None
    latency_us_p99: float | None
    sizes: list[int]
    algbw_gbps: float | None
    busbw_gbps: float | None
    duration_s: float | None
    evidence: dict[str, Any] | None


Measurement = Literal["latency_us_p50", "latency_us_p99", "algbw_gbps", "busbw_gbps"]
# A passed pair's measurements, each taken from its halves the pessimistic way.
MEASUREMENTS: tuple[tuple[Measurement, Callable[[list[float]], float]], ...] = (
    ("latency_us_p50", max),
    ("latency_us_p99", max),
    ("algbw_gbps", min),
    ("busbw_gbps", min),
)


def _unmeasured(
    status: str,
    stage: str | None,
    sizes: list[int],
    duration_s: float | None,
    pair_evidence: dict[str, Any] | None,
    reason: str | None = None,
    hint: str | None = None,
) -> PairResult:
    """A pair's result without measurements (merge_halves adds them where the pair passed)."""
    return {
        "status": status,
        "stage": stage,
        "reason": reason,
        "hint": hint,
        "latency_us_p50": None,
        "latency_us_p99": None,
        "sizes": sizes,
        "algbw_gbps": None,
        "busbw_gbps": None,
        "duration_s": duration_s,
        "evidence": pair_evidence,
    }


def _badness(half: dict[str, Any]) -> tuple[int, int, int]:
    # Higher is worse. Broken halves rank by how early they stopped, then by severity.
    severity, early = contract.STATUS_SEVERITY[half["status"]], -STAGE_ORDER.get(half.get("stage") or "", 0)
    if half["status"] in vocabulary.BAD_STATUSES:
        return (1, early, severity)
    return (0, severity, early)


def _pick(values: Iterable[float | None], fn: Callable[[list[float]], float]) -> float | None:
    present = [v for v in values if v is not None]
    return fn(present) if present else None


def merge_halves(half_a: dict[str, Any], half_b: dict[str, Any]) -> PairResult:
    """The pair's result from both validated halves (rank 0's and rank 1's)."""
    worse, better = (half_a, half_b) if _badness(half_a) >= _badness(half_b) else (half_b, half_a)
    out = _unmeasured(
        worse["status"],
        worse.get("stage"),
        sizes=worse.get("sizes") or better.get("sizes") or [],
        duration_s=_pick((half_a.get("duration_s"), half_b.get("duration_s")), max),
        pair_evidence=evidence.pair_evidence(half_a, half_b),
        reason=worse.get("reason") or (better.get("reason") if better["status"] == worse["status"] else None),
        hint=worse.get("hint") or better.get("hint"),
    )
    out = evidence.size_stall(out, out["evidence"]) or out  # type: ignore[assignment]
    if worse["status"] in contract.PASSED_STATUSES:
        for key, pessimistic in MEASUREMENTS:
            out[key] = _pick((half_a.get(key), half_b.get(key)), pessimistic)
    return out


def close_unanswered(
    half_a: dict[str, Any] | None,
    half_b: dict[str, Any] | None,
    names: tuple[str, str],
    *,
    offline: tuple[bool, bool],
    deadline_s: float | None = None,
) -> PairResult:
    """The pair's result when its deadline passed with a half (or both) missing.

    Never ``ok``: a half that did report a failure makes the pair ``timeout`` with its
    stage and reason (the silent side named in the hint); otherwise a silent side whose
    heartbeats stopped makes it ``offline`` (reason ``agent_offline``), else ``timeout``.
    """
    halves = (half_a, half_b)
    silent = [n for n, h in zip(names, halves) if h is None]
    gone = [n for n, h, off in zip(names, halves, offline) if h is None and off]
    arrived = next((h for h in halves if h is not None), None)
    failed = arrived if arrived and arrived["status"] not in contract.HARMLESS_STATUSES else None
    out = _unmeasured(
        "timeout",
        (arrived or {}).get("stage"),
        sizes=(arrived or {}).get("sizes") or [],
        duration_s=(arrived or {}).get("duration_s"),
        pair_evidence=evidence.pair_evidence(half_a, half_b),
    )
    if failed:
        # The probe ran and the side that reported saw it fail: that is the pair's result,
        # also when the silent side's agent died mid-probe (its node is blamed by the findings).
        hint = failed.get("hint") or f"{' and '.join(silent)} sent no result before the deadline"
        if gone:
            hint += f"; {' and '.join(gone)} then stopped sending heartbeats (agent gone)"
        out.update({"status": "timeout", "reason": failed.get("reason"), "hint": hint})
        out = evidence.size_stall(out, out["evidence"]) or out  # type: ignore[assignment]
    elif gone:
        out.update(
            {
                "status": "offline",
                "reason": "agent_offline",
                "hint": f"{' and '.join(gone)} stopped sending heartbeats; is the agent running "
                "and can it reach the broker?",
            }
        )
    else:
        within = f" within {deadline_s:.0f}s" if deadline_s else ""
        out.update(
            {
                "status": "timeout",
                "reason": "probe_crashed",
                "hint": f"{' and '.join(silent)} sent no result{within}: the probe or the agent died, "
                "or the agent never picked the command up",
            }
        )
    return out


def below_baseline(busbw_gbps: float | None, expected_gbps: float | None, ratio: float) -> bool:
    """True when a measured busbw is under ``ratio`` of the expected one."""
    return bool(busbw_gbps is not None and expected_gbps and busbw_gbps < ratio * expected_gbps)


def merge_many(halves: list[dict[str, Any]]) -> dict[str, Any]:
    """A group collective's result from every rank's half: the worst rank's view."""
    out = dict(halves[0])
    for half in halves[1:]:
        out = dict(merge_halves(out, half))
    return out


def ladder_order(stage_times: dict[str, float]) -> list[tuple[str, float]]:
    """A half's stage times in the ladder's order (contract.STAGES), whatever order the JSON kept; unknown keys last."""
    return sorted(stage_times.items(), key=lambda kv: (STAGE_ORDER.get(kv[0], len(STAGE_ORDER)), kv[0]))
