"""cluster-health: the Django project and app (models, planner, ingest, views, consumers)."""

from cluster_health.celery import app as celery_app

__all__ = ("celery_app",)
