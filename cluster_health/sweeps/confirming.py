"""The confirmation pass of a sweep: planned after its last round, folded into its pairs before the verdict.

After the planned rounds, ``plan_pass`` holds each pair below its own history against
its peers of the same moment and its load (core/judging.py: still ``degraded``, or
``contended``, or ``ok`` where the whole sweep ran alike), marks the pairs far below their
peers in this sweep (``degraded``/``below_peers``), then plans the pass (core.confirmation.plan):
extra pair rounds numbered after the sweep's last, recorded in its params as
``confirm_first`` (the first extra round; None when there was nothing to confirm).
``fold`` then writes what the second look decided into the planned pairs (their
``evidence["confirmation"]``, ``transient`` where it was fine again) and deletes the
pass's own rows, so every reader of the sweep sees each pair once, with both outcomes.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from django.conf import settings

from cluster_health import bulk, vocabulary
from cluster_health.core import confirmation, judging, planner
from cluster_health.models import PairProbe, Sweep
from cluster_health.nodes import judging_groups

log = logging.getLogger(__name__)
READ_FIELDS = ("id", "round", "node_a__name", "node_b__name", "status", "stage", "reason", "hint", "busbw_gbps")
READ_CHUNK = 10000


MAX_AFTER_S = 600.0  # the longest wait before the pass a sweep may ask for


def confirm_first(sweep: Sweep) -> int | None:
    """The first round of the sweep's confirmation pass, if it has one."""
    return sweep.params.get("confirm_first")


def after_s(sweep: Sweep) -> float:
    """How long this sweep's pass waits after its planned rounds: its request's ``confirm_after_s``, else
    CLUSTER_HEALTH_CONFIRM_AFTER_S."""
    own = sweep.params.get("confirm_after_s")
    return float(settings.CONFIRM_AFTER_S if own is None else own)


def waiting(sweep: Sweep, next_round: int, now: float | None = None) -> bool:
    """Whether ``next_round`` is the pass's first and its wait (``params["confirm_at"]``) has not run out."""
    at = sweep.params.get("confirm_at")
    return at is not None and next_round == confirm_first(sweep) and (time.time() if now is None else now) < at


def _pairs(sweep: Sweep, confirming: bool) -> list[dict[str, Any]]:
    rows = PairProbe.objects.filter(sweep=sweep)
    first = confirm_first(sweep)
    if first is not None:
        rows = rows.filter(round__gte=first) if confirming else rows.filter(round__lt=first)
    elif confirming:
        return []
    out = []
    for pk, rnd, a, b, status, stage, reason, hint, bw, sizes, ev in rows.values_list(
        *READ_FIELDS, "sizes", "evidence"
    ).iterator(chunk_size=READ_CHUNK):
        out.append(
            {
                "id": pk,
                "round": rnd,
                "a": a,
                "b": b,
                "status": status,
                "stage": stage,
                "reason": reason,
                "hint": hint,
                "busbw_gbps": bw,
                "sizes": sizes,
                "evidence": ev,
            }
        )
    return out


def confirms(sweep: Sweep) -> bool:
    """Whether this sweep's kind gets a confirmation pass (a discover sweep tries interfaces, not links)."""
    return sweep.kind not in vocabulary.DISCOVER_SWEEP_KINDS and bool(sweep.params.get("pair_rounds"))


def plan_pass(sweep: Sweep) -> list[list[tuple[str, str]]] | None:
    """After the last planned round: judge the pairs against their peers and plan the pass.

    The pass's rounds (the caller creates their probes, numbered from ``confirm_first``);
    empty when there is nothing (more) to confirm, None when another worker planned it
    first. Runs inside advance()'s transaction; the sweep's params and rounds are updated.
    """
    if "confirm_first" in sweep.params or not confirms(sweep):
        return []
    # An uplink round's pairs each carry a share of an uplink (closing.uplink_share): no peer of a link alone.
    pairs = [
        p for p in _pairs(sweep, confirming=False) if not (p["status"] == "ok" and "uplink" in (p["evidence"] or {}))
    ]
    judged = judging.against_peers(pairs, settings.DEGRADED_RATIO)
    for p in pairs:
        change = judged.get(confirmation.key(p["a"], p["b"]))
        if change:
            p.update({k: v for k, v in change.items() if k != "judged"})
            p["evidence"] = {**(p["evidence"] or {}), "judged": change["judged"]}
    marks = confirmation.peer_marks(pairs, settings.GROUP_PATTERN, judging_groups(sweep))
    for p in pairs:
        mark = marks.get(confirmation.key(p["a"], p["b"]))
        if mark:
            p.update(
                status=mark["status"],
                reason=mark["reason"],
                hint=mark["hint"],
                evidence={**(p["evidence"] or {}), "peers": mark["peers"]},
            )
    # Off (for comparison only): the pairs are still judged against their peers, nothing is probed again.
    todo = confirmation.plan(sweep.nodes, pairs) if settings.CONFIRMATION == "on" else []
    rounds = planner.schedule_pairs(todo, sweep.nodes)[: confirmation.MAX_ROUNDS]
    first = sweep.total_rounds + 1
    params = {**sweep.params, "confirm_first": first if rounds else None, "confirm_rounds": len(rounds)}
    wait = after_s(sweep)
    if rounds and wait > 0:  # the wait it had, and when advance() may start its first round
        params.update(confirm_after_s=wait, confirm_at=round(time.time() + wait, 3))
    if not Sweep.objects.filter(pk=sweep.pk, status="running", total_rounds=sweep.total_rounds).update(
        total_rounds=sweep.total_rounds + len(rounds), params=params
    ):
        return None
    bulk.conditional_update(
        PairProbe,
        {
            p["id"]: {
                "status": p["status"],
                "reason": p["reason"],
                "hint": (p["hint"] or None) and p["hint"][:4000],
                "evidence": p["evidence"],
            }
            for p in pairs
            if confirmation.key(p["a"], p["b"]) in marks or confirmation.key(p["a"], p["b"]) in judged
        },
        where="t.status IN (%s, %s)",
        where_params=["ok", "degraded"],
    )
    sweep.params, sweep.total_rounds = params, sweep.total_rounds + len(rounds)
    if rounds:
        log.info(
            "sweep %s: confirming %d pair(s) in %d round(s)%s",
            sweep.pk,
            len(confirmation.suspects(pairs)),
            len(rounds),
            f" after {wait:g} s" if "confirm_at" in params else "",
        )
    return rounds


def drop_pass(sweep: Sweep) -> None:
    """Delete the pass's rows of a sweep cancelled during it: nothing was decided, and each pair stays one row."""
    if confirm_first(sweep) is not None:
        PairProbe.objects.filter(sweep=sweep, round__gte=confirm_first(sweep)).delete()


def fold(sweep: Sweep) -> list[dict[str, Any]]:
    """Write the pass's outcomes into the planned pairs, delete the pass's rows; the findings it adds."""
    if confirm_first(sweep) is None:
        return []
    pairs = _pairs(sweep, confirming=False)
    again = _pairs(sweep, confirming=True)
    updates, found = confirmation.judge(pairs, again)
    by_key = {confirmation.key(p["a"], p["b"]): p for p in pairs}
    fields = {}
    for k, change in updates.items():
        p = by_key[k]
        row: dict[str, Any] = {"evidence": {**(p["evidence"] or {}), "confirmation": change["confirmation"]}}
        if "status" in change:
            row.update(status=change["status"], hint=change["hint"][:4000])
        else:
            row.update(status=p["status"], hint=p["hint"])
        fields[p["id"]] = row
    bulk.conditional_update(PairProbe, fields)
    drop_pass(sweep)
    return found
