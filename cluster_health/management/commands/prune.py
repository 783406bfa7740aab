"""Retention: drop raw detail older than N days, keep per-pair summaries.

Raw halves and per-size results of old probes are cleared (status, stage, reason,
latency and busbw stay, so history and baselines keep working); rejected messages
older than N days are deleted.
"""

from __future__ import annotations

from datetime import timedelta

from django.conf import settings
from django.core.management.base import BaseCommand
from django.utils import timezone

from cluster_health.models import GroupProbe, PairProbe, RejectedMessage


def prune(days: int, now=None) -> dict:
    now = now or timezone.now()
    cutoff = now - timedelta(days=days)
    pairs = PairProbe.objects.filter(sweep__created__lt=cutoff, pruned=False).update(
        half_a=None, half_b=None, sizes=None, pruned=True
    )
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
    return {"pairs": pairs, "groups": groups, "rejected": rejected}


class Command(BaseCommand):
    help = "Prune raw probe detail older than --days (default CLUSTER_HEALTH_RETENTION_DAYS); keep summaries."

    def add_arguments(self, parser):
        parser.add_argument("--days", type=int, default=settings.RETENTION_DAYS)

    def handle(self, *args, **opts):
        counts = prune(max(1, opts["days"]))
        self.stdout.write(
            f"pruned raw detail of {counts['pairs']} pair probes and {counts['groups']} group "
            f"probes; deleted {counts['rejected']} rejected messages"
        )
