"""The ingest consumer process: agents' halves taken off queue server.ingest in batches.

Every server worker (celery worker -Q server) starts one and stops it
(cluster_health.celery.IngestConsumerStep); run it by hand only to look at it.
"""

from __future__ import annotations

from django.core.management.base import BaseCommand

from cluster_health.ingest import consumer


class Command(BaseCommand):
    help = "Take agents' probe halves off queue server.ingest in batches (started by each server worker)."

    def add_arguments(self, parser):
        parser.add_argument(
            "--name", required=True, help="the server worker's name: the consumer's batch list is named by it"
        )
        parser.add_argument("--parent", type=int, default=0, help="stop when this process (the worker) is gone")

    def handle(self, *args, name: str, parent: int, **options):
        consumer.serve(name, parent)
