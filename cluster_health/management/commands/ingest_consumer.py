"""The ingest consumer process: agents' halves and heartbeats taken off the nodes' ingest lists in batches.

Every server worker (celery worker -Q server) starts one and stops it
(cluster_health.celery.IngestConsumerStep). More can run on their own, on any machine that
reaches the broker and the database, each with a name of its own (docs/OPERATIONS.md,
"Scaling out ingest").
"""

from __future__ import annotations

from django.core.management.base import BaseCommand

from cluster_health.ingest import consumer


class Command(BaseCommand):
    help = "Take agents' halves and heartbeats off the nodes' ingest lists in batches (one per server worker, or more)."

    def add_arguments(self, parser):
        parser.add_argument(
            "--name",
            required=True,
            help="a name of its own (a worker's consumer: the worker's); its batch list is named by it",
        )
        parser.add_argument("--parent", type=int, default=0, help="stop when this process (the worker) is gone")

    def handle(self, *args, name: str, parent: int, **options):
        consumer.serve(name, parent)
