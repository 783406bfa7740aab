"""Celery tasks on queue "server": thin wrappers over ingest, sweeps and the reaper."""

from __future__ import annotations

from celery import shared_task

from agents import contract
from cluster_health import defaults, ingest, reaper, sweeps


@shared_task(name=contract.TASK_RESULT, ignore_result=True)
def result(result=None):
    return ingest.ingest_result(result)


@shared_task(name=ingest.TASK_RESULTS, ignore_result=True)
def results(results=None):
    """Many halves in one message: one transaction per batch instead of one per half."""
    return ingest.ingest_results(list(results or []))


@shared_task(name=contract.TASK_HEARTBEAT, ignore_result=True)
def heartbeat(heartbeat=None):
    return ingest.record_heartbeat(heartbeat)


@shared_task(name=sweeps.TASK_START, ignore_result=True)
def start_sweep(sweep_id):
    sweeps.start_sweep(sweep_id)


@shared_task(name=sweeps.TASK_ADVANCE, ignore_result=True)
def advance_sweep(sweep_id):
    sweeps.advance(sweep_id)


@shared_task(name="cluster_health.cancel_sweep", ignore_result=True)
def cancel_sweep(sweep_id):
    sweeps.cancel(sweep_id)


@shared_task(name=defaults.TASK_REAP, ignore_result=True)
def reap():
    return reaper.reap()


@shared_task(name=defaults.TASK_SCHEDULED_SWEEP, ignore_result=True)
def scheduled_sweep(kind="full", **params):
    """A sweep from a django-celery-beat schedule (the nightly full sweep by default)."""
    sweep = sweeps.request_sweep(source="schedule", kind=kind, **params)
    return sweep.pk
