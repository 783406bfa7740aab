"""Repeat offenders as of a moment: the nodes and links blamed on confirmed evidence on several of the last days.

The rule is core/history.py's (``blamed_subjects``, ``repeat_offenders``); this module reads what it
needs from the finished sweeps of the window: only the sweeps with a fail finding can blame anything,
so their fail findings and confirmed pairs are read, never the pair rows of the sweeps that passed.
A sweep's findings name the repeat offenders as of its end; the Nodes page and ``GET /api/nodes``
ask ``current()``, as of now, so a node's flag goes when its last bad day leaves the window even if
no sweep covered it since.
"""

from __future__ import annotations

from datetime import date, datetime, time, timedelta

from django.conf import settings
from django.urls import reverse
from django.utils import timezone

from cluster_health import vocabulary
from cluster_health.core import history
from cluster_health.models import Finding, PairProbe, Sweep

LEFT_OUT_KINDS = (*vocabulary.DISCOVER_SWEEP_KINDS, "preflight")


def window_start(today: date) -> datetime:
    """The first moment of the window that ends with ``today`` (TIME_ZONE's midnight)."""
    first = today - timedelta(days=settings.REPEAT_OFFENDER_DAYS - 1)
    return timezone.make_aware(datetime.combine(first, time.min))


def blamed_by_sweep(since: datetime, before: int | None = None) -> list[tuple[int, date, set[str]]]:
    """Each finished sweep since ``since`` (and before sweep ``before``) that blamed something on confirmed
    evidence: its id, the day it finished and what it blamed (history.blamed_subjects)."""
    sweeps = Sweep.objects.filter(status="finished", finished__gte=since, findings__severity="fail").exclude(
        kind__in=LEFT_OUT_KINDS
    )
    if before is not None:
        sweeps = sweeps.filter(pk__lt=before)
    rows = {
        pk: (kind, nodes, finished)
        for pk, kind, nodes, finished in sweeps.distinct().values_list("pk", "kind", "nodes", "finished")
    }
    if not rows:
        return []
    failing: dict[int, list[tuple[str, list[str]]]] = {pk: [] for pk in rows}
    for sid, subject, listed in Finding.objects.filter(sweep_id__in=rows, severity="fail").values_list(
        "sweep_id", "subject", "pairs"
    ):
        failing[sid].append((subject, listed))
    confirmed: dict[int, set[tuple[str, str]]] = {pk: set() for pk in rows}
    seen_again = (
        PairProbe.objects.filter(sweep_id__in=rows, evidence__confirmation__outcome="confirmed")
        .exclude(status="ok")  # the pass probes again only pairs that were not ok
        .values_list("sweep_id", "node_a__name", "node_b__name")
    )
    for sid, a, b in seen_again:
        confirmed[sid].add((a, b) if a <= b else (b, a))
    out = []
    for pk in sorted(rows):
        kind, nodes, finished = rows[pk]
        local = kind in vocabulary.GPU_SWEEP_KINDS
        blamed = history.blamed_subjects(failing[pk], set(nodes or ()), confirmed[pk], local)
        if blamed:
            out.append((pk, timezone.localdate(finished), blamed))
    return out


def current(now: datetime | None = None) -> dict[str, dict]:
    """Subject (a node, or a link "a<->b") -> its repeat_offender finding as of ``now``, with ``history``: the page
    where its failures are listed (the node's, or the pair's)."""
    today = timezone.localdate(now or timezone.now())
    found = history.repeat_offenders(
        blamed_by_sweep(window_start(today)), settings.REPEAT_OFFENDER_K, settings.REPEAT_OFFENDER_DAYS, today
    )
    for f in found:
        f["history"] = history_url(f["subject"])
    return {f["subject"]: f for f in found}


def history_url(subject: str) -> str:
    """Where a node's or a link's past failures are listed."""
    if "<->" in subject:
        a, _, b = subject.partition("<->")
        return reverse("pair", args=sorted((a, b)))
    return reverse("node", args=[subject]) + "#recent-problems"


def api_field(finding: dict | None) -> dict | None:
    """A repeat offender as the API gives it: the days, the sweeps, the count, the window, its history's page."""
    if finding is None:
        return None
    detail = finding["detail"]
    return {
        "subject": finding["subject"],
        "days": detail["days"],
        "blamed_days": detail["blamed"],
        "window_days": detail["window"],
        "sweeps": detail["sweeps"],
        "text": finding["text"],
        "history": finding["history"],
    }
