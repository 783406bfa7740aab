"""Celery tasks on queue "server": thin wrappers over ingest, sweeps and the reaper.

Agent messages (result, heartbeat) pass the signature check before anything is
applied. Anyone who can reach Redis can queue the sweep tasks too, so they take
ids only and do what the web and CLI could do; the agents' own messages are the
ones that carry data, and those are signed.
"""

from __future__ import annotations

import logging

from celery import shared_task
from django.conf import settings

from agents import contract
from cluster_health import hang_diagnoses, ingest, retention, sweeps, vocabulary
from cluster_health.ingest.auth import authenticate, remember_nonce
from cluster_health.models import HangDiagnosis
from cluster_health.shapes import matrices
from cluster_health.sweeps import lifecycle, reaper, statistics

log = logging.getLogger(__name__)


@shared_task(name=contract.TASK_RESULT, ignore_result=True, bind=True)
def result(self, result=None, auth=None, **unexpected):
    """One agent's half sent on queue "server" (agents before the ingest consumer; tools): checked at the
    boundary, then appended to the ingest buffer and applied in a batch by its worker's drainer
    (ingest/buffer). Agents send halves on queue "server.ingest", taken in batches by the ingest consumer."""
    # No nonce: a replayed or redelivered half is a duplicate and changes nothing.
    return authenticate(contract.TASK_RESULT, "result", result, auth) or ingest.buffer_result(
        result, worker=self.request.hostname
    )


@shared_task(name=contract.TASK_HEARTBEAT, ignore_result=True)
def heartbeat(heartbeat=None, auth=None, **unexpected):
    refused = authenticate(contract.TASK_HEARTBEAT, "heartbeat", heartbeat, auth, once=True)
    if refused:
        return refused
    outcome = ingest.record_heartbeat(heartbeat)
    remember_nonce(auth)
    return outcome


@shared_task(name=vocabulary.TASK_START_SWEEP, ignore_result=True)
def start_sweep(sweep_id):
    lifecycle.start_or_fail(sweep_id)


@shared_task(name=vocabulary.TASK_REAP, ignore_result=True, bind=True)
def reap(self):
    # What a dead consumer or drainer left, before silence is judged.
    ingest.reclaim_orphans()
    ingest.drain_all(worker=self.request.hostname)
    counts = reaper.reap()
    statistics.vacuum_if_churned()  # a large sweep's dead row versions, cleared while it runs
    matrices.refresh_open()  # a large open sweep's matrix snapshot, brought forward off the ingest path
    return counts


@shared_task(name=vocabulary.TASK_SCHEDULED_SWEEP, ignore_result=True)
def scheduled_sweep(kind="full", **params):
    """A sweep from a django-celery-beat schedule (the nightly full sweep by default); kind ``idle``: an idle-gap
    sweep (cluster_health/sweeps/idle.py), its only parameter ``max_nodes``."""
    if kind == "idle":
        from cluster_health.sweeps import idle

        try:
            return idle.start(idle.schedule_max_nodes(params), source="schedule").pk
        except (idle.IdleSweepError, idle.slurm.SlurmError) as exc:
            log.warning("idle schedule: no sweep this time: %s", exc)
            return None
    sweep = sweeps.request_sweep(source="schedule", kind=kind, **params)
    return sweep.pk


@shared_task(name=vocabulary.TASK_ANALYZE_PAIRS, ignore_result=True)
def analyze_pairs():
    """After a large sweep closed: the pair table's planner statistics brought up to date (sweeps/statistics)."""
    return statistics.analyze_pairs()


@shared_task(name=vocabulary.TASK_PRUNE, ignore_result=True)
def prune():
    """Retention (beat, daily): raw probe detail past RETENTION_DAYS, rejected messages past their own bound."""
    return retention.prune(settings.RETENTION_DAYS)


@shared_task(name=vocabulary.TASK_HANG, ignore_result=True)
def hang(diagnosis_id=None, timeout_s=30.0, **unexpected):
    """A diagnosis the API asked for: the same steps as ``manage.py hang`` (it takes one worker slot
    for at most its timeout, bounded by the API)."""
    diagnosis = HangDiagnosis.objects.filter(pk=diagnosis_id, status="collecting").first()
    if diagnosis is None or not isinstance(timeout_s, (int, float)) or not 5 <= timeout_s <= 600:
        return None
    return hang_diagnoses.run(diagnosis, float(timeout_s))["verdict"]
