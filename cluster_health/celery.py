"""The server's Celery app: queue "server" (ingest, heartbeats, planner, reaper) and beat."""

import os

from celery import Celery, signals

from agents import broker

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "cluster_health.settings")

app = Celery("cluster_health")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks(["cluster_health", "cluster_health.actions"])


@signals.after_setup_logger.connect
@signals.after_setup_task_logger.connect
def _redact_passwords(logger, **_):
    """The worker's and beat's logs (Celery replaces Django's handlers) show URLs without passwords."""
    broker.redact_logs(logger)
