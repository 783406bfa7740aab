"""The server's Celery app: queue "server" (ingest, heartbeats, planner, reaper) and beat."""

import os

from celery import Celery, signals

from agents import broker

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "cluster_health.settings")

app = Celery("cluster_health")
app.config_from_object("django.conf:settings", namespace="CELERY")
# Celery's Django fixup closes the database connection before and after every task unless
# this is set; with it, it closes only every 2x this many tasks, and the connection's age,
# health and errors are Django's to judge (_database_connection_checked below).
app.conf.update(CELERY_DB_REUSE_MAX=10_000)
app.autodiscover_tasks(["cluster_health", "cluster_health.actions"])


@signals.after_setup_logger.connect
@signals.after_setup_task_logger.connect
def _redact_passwords(logger, **_):
    """The worker's and beat's logs (Celery replaces Django's handlers) show URLs without passwords."""
    broker.redact_logs(logger)


@signals.worker_init.connect
def _keep_database_connections(**_):
    """Worker processes keep their database connection for WORKER_DB_CONN_MAX_AGE, checked before reuse.

    Set in the worker's main process before its pool forks; connection wrappers read these
    settings when they connect. The web process is not a worker and keeps DB_CONN_MAX_AGE.
    """
    from django.conf import settings
    from django.db import connections

    for alias in connections:
        connections.settings[alias]["CONN_MAX_AGE"] = settings.WORKER_DB_CONN_MAX_AGE
        connections.settings[alias]["CONN_HEALTH_CHECKS"] = True


@signals.task_prerun.connect
@signals.task_postrun.connect
def _database_connection_checked(sender=None, **_):
    """As Django does around a request: a connection past its age, or broken by an error, is closed.

    Not for a task applied in the caller's process (eager): the caller owns that connection.
    """
    if getattr(getattr(sender, "request", None), "is_eager", False):
        return
    from django.db import close_old_connections

    close_old_connections()


@signals.worker_process_shutdown.connect
def _close_database_connections(**_):
    """A pool process that stops says goodbye to the database, so its session ends with it."""
    from django.db import connections

    connections.close_all()
