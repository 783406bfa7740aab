"""Retention: drop raw detail older than N days, keep per-pair summaries; collapse old sweeps.

Raw halves and per-size results of old probes are cleared, and a passing probe's
evidence (status, stage, reason, latency and busbw stay, so history and baselines
keep working; a failure keeps the evidence its findings rest on); rejected messages
older than N days are deleted. A closed sweep older than ``PAIR_ROWS_DAYS``
collapses into its stored matrix: its passing pair rows are deleted (the matrix
keeps their status, busbw and latency), and every pair that did not pass keeps its
row, hint and evidence. The sweep JSON, the API, baselines and comparisons read a
collapsed sweep's passing pairs from the matrix; pair history lists only what rows
remain (docs/CONTROL_PLANE.md, "Retention and storage").
"""

from __future__ import annotations

from datetime import timedelta

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from cluster_health.models import GroupProbe, PairProbe, RejectedMessage, Sweep, SweepMatrix
from cluster_health.shapes import matrices

DELETE_BATCH = 50000  # pair rows per DELETE when a sweep collapses: bounded locks and WAL per statement


def collapse(sweep: Sweep, now) -> int:
    """Delete a closed sweep's passing pair rows, its matrix stored first; returns the rows deleted."""
    if not SweepMatrix.objects.filter(sweep=sweep, open_round__isnull=True).exists():
        matrices.store_matrix(sweep)
    deleted = 0
    while True:
        with transaction.atomic():
            ids = list(PairProbe.objects.filter(sweep=sweep, status="ok").values_list("pk", flat=True)[:DELETE_BATCH])
            if not ids:
                break
            deleted += PairProbe.objects.filter(pk__in=ids).delete()[0]
            done = {"at": now.isoformat(), "ok_rows": sweep.collapsed_ok + deleted}
            Sweep.objects.filter(pk=sweep.pk).update(params={**sweep.params, "collapsed": done})
    return deleted


def collapse_old(days: int, now=None) -> dict:
    """Collapse every closed sweep created more than ``days`` ago that still has passing pair rows."""
    now = now or timezone.now()
    cutoff = now - timedelta(days=days)
    old = Sweep.objects.filter(created__lt=cutoff).exclude(status__in=Sweep.OPEN_STATUSES)
    sweeps, rows = 0, 0
    for sweep in old.filter(pk__in=PairProbe.objects.filter(status="ok").values("sweep_id")).order_by("pk"):
        rows += collapse(sweep, now)
        sweeps += 1
    return {"sweeps": sweeps, "rows": rows}


def prune(days: int, now=None, pair_rows_days: int | None = None) -> dict:
    """Clear raw detail older than ``days``, delete old rejected messages, collapse sweeps past PAIR_ROWS_DAYS."""
    now = now or timezone.now()
    cutoff = now - timedelta(days=days)
    old = PairProbe.objects.filter(sweep__created__lt=cutoff, pruned=False)
    # A passing pair's evidence (TCP counters and the like) is raw detail too; a failure keeps the
    # evidence its findings rest on.
    pairs = old.filter(status="ok").update(half_a=None, half_b=None, sizes=None, evidence=None, pruned=True)
    pairs += old.update(half_a=None, half_b=None, sizes=None, pruned=True)
    groups = GroupProbe.objects.filter(sweep__created__lt=cutoff).exclude(halves={}).update(halves={})
    # Rejected messages are whatever reached Redis: kept shorter, and never more than a bounded number.
    reject_cutoff = now - timedelta(days=min(days, settings.REJECTED_RETENTION_DAYS))
    rejected, _ = RejectedMessage.objects.filter(received__lt=reject_cutoff).delete()
    newest = (
        RejectedMessage.objects.order_by("-received")
        .values_list("received", flat=True)[settings.MAX_REJECTED_MESSAGES : settings.MAX_REJECTED_MESSAGES + 1]
        .first()
    )
    if newest is not None:
        rejected += RejectedMessage.objects.filter(received__lte=newest).delete()[0]
    keep = settings.PAIR_ROWS_DAYS if pair_rows_days is None else pair_rows_days
    collapsed = collapse_old(keep, now) if keep else {"sweeps": 0, "rows": 0}
    return {"pairs": pairs, "groups": groups, "rejected": rejected, "collapsed": collapsed}
