"""The server's Celery app: queue "server" (planner, reaper, schedules), beat, and the ingest consumer.

A worker that takes queue "server" starts an ingest consumer process beside it
(IngestConsumerStep): agents' halves and heartbeats arrive on queue "server.ingest",
which no Celery worker consumes, and the consumer applies them in batches
(cluster_health/ingest/consumer.py). Queue "server" still takes them as tasks from
agents that predate the consumer.
"""

import logging
import os
import subprocess
import sys

from celery import Celery, bootsteps, signals

from agents import broker
from cluster_health import vocabulary

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "cluster_health.settings")

app = Celery("cluster_health")
app.config_from_object("django.conf:settings", namespace="CELERY")
# Celery's Django fixup closes the database connection before and after every task unless
# this is set; with it, it closes only every 2x this many tasks, and the connection's age,
# health and errors are Django's to judge (_database_connection_checked below).
app.conf.update(CELERY_DB_REUSE_MAX=10_000)
app.autodiscover_tasks(["cluster_health", "cluster_health.actions"])

log = logging.getLogger(__name__)


class IngestConsumerStep(bootsteps.StartStopStep):
    """The worker's ingest consumer process: started with the worker, restarted if it dies, stopped with it.

    A process of its own (started by exec, not forked from the worker) so that its
    batches neither wait behind tasks nor hold up the worker's event loop. It dies with
    the worker however the worker dies (PR_SET_PDEATHSIG), and its batch in hand is
    applied by the next consumer of the same name or put back on the queue.
    """

    requires = ("celery.worker.components:Timer",)
    WATCH_S = 5.0  # how often the worker checks that its consumer runs
    STOP_S = 20.0  # a stopping consumer finishes the batch in hand within this, or is killed

    def __init__(self, worker, **kwargs):
        super().__init__(worker, **kwargs)
        self.proc = None
        self.watch = None
        self.name = ""

    def include_if(self, worker):
        queues = worker.app.amqp.queues.consume_from or worker.app.amqp.queues
        return vocabulary.SERVER_QUEUE in queues

    def start(self, worker):
        self.name = worker.hostname
        self._spawn()
        self.watch = worker.timer.call_repeatedly(self.WATCH_S, self._check)

    def _spawn(self):
        # django's own entry point: the worker's DJANGO_SETTINGS_MODULE and working directory, no manage.py needed.
        command = [sys.executable, "-m", "django", "ingest_consumer", "--name", self.name]
        self.proc = subprocess.Popen([*command, "--parent", str(os.getpid())], close_fds=True)
        log.info("ingest consumer %s started (pid %d)", self.name, self.proc.pid)

    def _check(self):
        if self.proc is not None and self.proc.poll() is not None:
            log.error("ingest consumer %s exited with %s; starting it again", self.name, self.proc.returncode)
            self._spawn()

    def stop(self, worker):
        if self.watch is not None:
            self.watch.cancel()
            self.watch = None
        proc, self.proc = self.proc, None
        if proc is None or proc.poll() is not None:
            return
        proc.terminate()
        try:
            proc.wait(self.STOP_S)
        except subprocess.TimeoutExpired:
            log.error("ingest consumer %s did not stop within %.0fs; killed", self.name, self.STOP_S)
            proc.kill()
            proc.wait()

    shutdown = stop


app.steps["worker"].add(IngestConsumerStep)


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
