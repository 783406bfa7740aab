"""Closing probes: the one place that judges a pair against its baseline, writes its final fields once
and announces it to browsers.

Ingest (both halves in) and the reaper (a deadline or a silent node) both close
through here, so a pair's final row has one shape whichever way it closed. Every
write is conditional on the probe still being open: a pair closes once.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, NamedTuple

from django.conf import settings
from django.utils import timezone

from agents import contract
from cluster_health import bulk
from cluster_health.core import evidence, expected_busbw, judging
from cluster_health.core.merge import PairResult
from cluster_health.models import OPEN_PAIR_STATUSES, BaselinePair, GroupProbe, PairProbe, Sweep, pair_key
from cluster_health.shapes import broadcast, pairs

OPEN_WHERE = "t.status IN (%s, %s)"  # the SQL twin of OPEN_PAIR_STATUSES, for conditional writes


class ProbeRow(NamedTuple):
    """What closing needs to know about a pair probe, read in one query for a batch."""

    pk: int
    sweep_id: int
    round: int
    a: str
    b: str
    status: str
    baseline_id: int | None
    started: datetime | None
    sweep_kind: str = ""


PROBE_ROW_FIELDS = (
    "id",
    "sweep_id",
    "round",
    "node_a__name",
    "node_b__name",
    "status",
    "sweep__baseline_id",
    "started",
    "sweep__kind",
)


def probe_rows(pks) -> dict[int, ProbeRow]:
    return {row[0]: ProbeRow(*row) for row in PairProbe.objects.filter(pk__in=pks).values_list(*PROBE_ROW_FIELDS)}


class Expected(NamedTuple):
    """A link's baseline: its busbw (a median where several sweeps were used), their spread and count,
    and the load its figures were measured under (their median score, core/judging.py)."""

    busbw_gbps: float
    mad_gbps: float | None
    samples: int
    load: float | None = None


def _expected_busbw(rows: dict[int, ProbeRow], results: dict[int, PairResult]) -> dict[int, Expected]:
    """Baseline of the pairs about to close ok, in one query per baseline."""
    wanted: dict[int, dict[tuple[str, str], int]] = {}
    for pk, result in results.items():
        row = rows[pk]
        if row.baseline_id and result["status"] == "ok" and result["busbw_gbps"] is not None:
            wanted.setdefault(row.baseline_id, {})[pair_key(row.a, row.b)] = pk
    out = {}
    for baseline_id, keys in wanted.items():
        firsts = {k[0] for k in keys}
        for na, nb, bw, mad, n, load in BaselinePair.objects.filter(
            baseline_id=baseline_id, node_a__in=firsts
        ).values_list("node_a", "node_b", "busbw_gbps", "mad_gbps", "samples", "load"):
            if (na, nb) in keys:
                out[keys[(na, nb)]] = Expected(bw, mad, n, load)
    return out


def judge_against_baseline(result: PairResult, expected: Expected | float | None) -> PairResult:
    """The result, ``degraded``/``below_baseline`` when its busbw is under its baseline's band,
    else ``degraded``/``lossy`` when it passed while retransmitting a share of its segments.

    Below the band is provisional: once the sweep's planned rounds are done, core/judging.py
    holds the pair against its peers of the same moment and its load. So the baseline it was
    judged against goes into its evidence (``expected``). A baseline too young to judge (its
    spread unknown) judges nothing here.
    """
    if isinstance(expected, (int, float)):
        expected = Expected(float(expected), None, 1)
    busbw, ratio = result["busbw_gbps"], settings.DEGRADED_RATIO
    if result["status"] != "ok" or busbw is None or not expected or not expected.busbw_gbps:
        return evidence.lossy(result, result.get("evidence")) or result  # type: ignore[return-value]
    result = {
        **result,
        "evidence": {
            **(result.get("evidence") or {}),
            "expected": {
                "busbw_gbps": expected.busbw_gbps,
                "mad_gbps": expected.mad_gbps,
                "samples": expected.samples,
                "load": expected.load,
            },
        },
    }
    band = expected_busbw.threshold(expected.busbw_gbps, expected.mad_gbps, expected.samples, ratio)
    if band is None or busbw >= band:
        return evidence.lossy(result, result.get("evidence")) or result  # type: ignore[return-value]
    return {
        **result,
        "status": "degraded",
        "reason": "below_baseline",
        "hint": expected_busbw.slow_text(busbw, expected.busbw_gbps, expected.mad_gbps, expected.samples, ratio),
    }


def uplink_rounds(rows: dict[int, ProbeRow]) -> dict[int, dict[int, str]]:
    """The uplink rounds (round -> the group sending out) of these rows' topology sweeps; no query for others."""
    ids = {row.sweep_id for row in rows.values() if row.sweep_kind == "topology"}
    found = dict(Sweep.objects.filter(pk__in=ids).values_list("pk", "params")) if ids else {}
    return {pk: {int(k): str(g) for k, g in ((p or {}).get("uplink_rounds") or {}).items()} for pk, p in found.items()}


def uplink_share(result: PairResult, group: str) -> PairResult:
    """A pair of an uplink round: one of several sharing the group's uplink at once, so its busbw is a share
    of it, not the link's figure. Never judged against the link's baseline (nor its peers, nor fed into
    baselines: evidence ``uplink``); only a failure stays one."""
    return {**result, "evidence": {**(result.get("evidence") or {}), "uplink": group}}


def final_fields(rows: dict[int, ProbeRow], results: dict[int, PairResult], now: datetime) -> dict[int, dict[str, Any]]:
    """The final model fields (all but ``finished``) of each pair, judged against its baseline (but the pairs of
    a topology sweep's uplink rounds, which share an uplink at once: ``uplink_share``)."""
    uplinks = uplink_rounds(rows)
    expected = _expected_busbw(rows, results)
    out = {}
    for pk, result in results.items():
        group = uplinks.get(rows[pk].sweep_id, {}).get(rows[pk].round)
        judged = uplink_share(result, group) if group is not None else judge_against_baseline(result, expected.get(pk))
        started = rows[pk].started
        duration = judged["duration_s"]
        if duration is None and started:
            duration = (now - started).total_seconds()
        out[pk] = {
            **judged,
            "hint": (judged["hint"] or None) and judged["hint"][: contract.MAX_TEXT],
            "duration_s": duration,
            "load": judging.evidence_score(judged.get("evidence")),
        }
    return out


def close_pairs(
    rows: dict[int, ProbeRow], results: dict[int, PairResult], now: datetime | None = None, *, announce_now: bool = True
) -> dict[int, dict[str, Any]]:
    """Write each open pair's final result (once); returns the fields of the pairs this call closed.

    The caller advances the sweeps. ``announce_now=False`` leaves the broadcast to a
    caller that batches it with other closes (ingest).
    """
    now = now or timezone.now()
    fields = final_fields(rows, results, now)
    closed = bulk.conditional_update(
        PairProbe, fields, where=OPEN_WHERE, where_params=OPEN_PAIR_STATUSES, constants={"finished": now}
    )
    written = {pk: fields[pk] for pk in closed}
    if announce_now:
        announce(rows, written)
    return written


def rounds_open(sweep_id: int, rounds: set[int]) -> bool:
    """Whether a pair of these rounds is still open, read after closing some of their pairs.

    A pair closes only in its sweep's current round (rounds are a barrier), so while this
    holds the sweep has nothing to advance, and its advance (a transaction that reads the
    sweep's row) is left out: most batches of a round close only some of its pairs.
    """
    return PairProbe.objects.filter(sweep_id=sweep_id, round__in=rounds, status__in=OPEN_PAIR_STATUSES).exists()


def announce(rows: dict[int, ProbeRow], closed: dict[int, dict[str, Any]]) -> None:
    """One browser update per sweep for the pairs that just closed (sent after the commit)."""
    by_sweep: dict[int, list[dict]] = {}
    for pk, fields in closed.items():
        row = rows[pk]
        by_sweep.setdefault(row.sweep_id, []).append(
            pairs.pair_dict({**fields, "id": pk, "round": row.round, "a": row.a, "b": row.b})
        )
    for sweep_id, shown in by_sweep.items():
        broadcast.sweep_update(Sweep(pk=sweep_id), shown, round_only=True)


def close_group(group: GroupProbe, merged: dict, now: datetime | None = None) -> bool:
    """Write a group probe's final result (once); the caller advances the sweep."""
    now = now or timezone.now()
    updated = GroupProbe.objects.filter(pk=group.pk, status__in=OPEN_PAIR_STATUSES).update(
        status=merged["status"],
        stage=merged.get("stage"),
        reason=merged.get("reason"),
        hint=merged.get("hint"),
        latency_us_p50=merged.get("latency_us_p50"),
        busbw_gbps=merged.get("busbw_gbps"),
        finished=now,
    )
    if updated:
        broadcast.sweep_update(group.sweep)
    return bool(updated)
