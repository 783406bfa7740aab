"""The server's Celery app: queue "server" (ingest, heartbeats, planner, reaper) and beat."""

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "cluster_health.settings")

app = Celery("cluster_health")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks(["cluster_health", "cluster_health.actions"])
