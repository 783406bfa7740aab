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
    cutoff = (now or timezone.now()) - timedelta(days=days)
    pairs = PairProbe.objects.filter(sweep__created__lt=cutoff, pruned=False).update(
        half_a=None, half_b=None, sizes=None, pruned=True)
    groups = GroupProbe.objects.filter(sweep__created__lt=cutoff).exclude(halves={}).update(halves={})
    rejected, _ = RejectedMessage.objects.filter(received__lt=cutoff).delete()
    return {"pairs": pairs, "groups": groups, "rejected": rejected}


class Command(BaseCommand):
    help = "Prune raw probe detail older than --days (default CLUSTER_HEALTH_RETENTION_DAYS); keep summaries."

    def add_arguments(self, parser):
        parser.add_argument("--days", type=int, default=settings.RETENTION_DAYS)

    def handle(self, *args, **opts):
        counts = prune(max(1, opts["days"]))
        self.stdout.write(f"pruned raw detail of {counts['pairs']} pair probes and {counts['groups']} group "
                          f"probes; deleted {counts['rejected']} rejected messages")
