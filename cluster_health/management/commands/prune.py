"""Retention, run by hand: ``manage.py prune [--days N]`` (cluster_health.retention; the beat job runs it daily)."""

from __future__ import annotations

from django.conf import settings
from django.core.management.base import BaseCommand

from cluster_health.retention import prune


class Command(BaseCommand):
    help = "Prune raw probe detail older than --days (default CLUSTER_HEALTH_RETENTION_DAYS); keep summaries."

    def add_arguments(self, parser):
        parser.add_argument("--days", type=int, default=settings.RETENTION_DAYS)

    def handle(self, *args, **opts):
        counts = prune(max(1, opts["days"]))
        self.stdout.write(
            f"pruned raw detail of {counts['pairs']} pair probes and {counts['groups']} group "
            f"probes; deleted {counts['rejected']} rejected messages; collapsed "
            f"{counts['collapsed']['sweeps']} sweeps into their matrices ({counts['collapsed']['rows']} "
            "passing pair rows deleted)"
        )
