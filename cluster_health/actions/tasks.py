"""Celery tasks for actions, on queue "server": evaluate a finished sweep, deliver alerts, act on Slurm."""

from __future__ import annotations

import logging
from datetime import timedelta

from celery import shared_task
from django.conf import settings
from django.db import transaction
from django.utils import timezone

from cluster_health import vocabulary
from cluster_health.actions import alerts, bootstrap, notify, slurm
from cluster_health.actions.models import AlertDelivery
from cluster_health.models import Sweep
from cluster_health.queues import dispatch

log = logging.getLogger(__name__)


def sweep_finished(sweep_id: int) -> None:
    """Queue the actions for a finished sweep; call after the commit that finished it."""
    dispatch.send_to_server(vocabulary.TASK_AFTER_SWEEP, sweep_id=sweep_id)
    if settings.SLURM_ACTIONS != "off":
        dispatch.send_to_server(vocabulary.TASK_SLURM, sweep_id=sweep_id)


def _send_deliveries(ids: list[int]) -> None:
    for pk in ids:
        dispatch.send_to_server(vocabulary.TASK_DELIVER, delivery_id=pk)


@shared_task(name=vocabulary.TASK_AFTER_SWEEP, ignore_result=True)
def after_sweep(sweep_id):
    sweep = Sweep.objects.filter(pk=sweep_id, status="finished").first()
    if sweep is None:
        return 0
    bootstrap.ensure_env_channels()
    with transaction.atomic():
        ids = alerts.evaluate_sweep(sweep)
        transaction.on_commit(lambda: _send_deliveries(ids))
    return len(ids)


@shared_task(name=vocabulary.TASK_OFFLINE, ignore_result=True)
def check_offline():
    with transaction.atomic():
        ids = alerts.evaluate_offline()
        transaction.on_commit(lambda: _send_deliveries(ids))
    return len(ids)


@shared_task(
    name=vocabulary.TASK_DELIVER,
    bind=True,
    ignore_result=True,
    autoretry_for=(notify.DeliveryError,),
    retry_backoff=settings.ALERT_RETRY_BACKOFF_S,
    retry_backoff_max=900,
    retry_jitter=True,
    max_retries=settings.ALERT_MAX_RETRIES,
)
def deliver(self, delivery_id):
    delivery = (
        AlertDelivery.objects.select_related("alert", "channel", "alert__opened_by", "alert__resolved_by")
        .filter(pk=delivery_id)
        .first()
    )
    if delivery is None or delivery.status != "pending":
        return delivery.status if delivery else None  # sent already: a task delivered twice sends once
    channel = delivery.channel
    if not channel.enabled:
        AlertDelivery.objects.filter(pk=delivery.pk, status="pending").update(status="disabled")
        return "disabled"
    hour_ago = timezone.now() - timedelta(hours=1)
    if (
        AlertDelivery.objects.filter(channel=channel, status="sent", sent__gte=hour_ago).count()
        >= settings.ALERT_RATE_PER_HOUR
    ):
        AlertDelivery.objects.filter(pk=delivery.pk, status="pending").update(
            status="rate_limited", last_error=f"over {settings.ALERT_RATE_PER_HOUR} messages in the last hour"
        )
        log.warning("alert %s to channel %s dropped: rate limit", delivery.alert.key, channel.pk)
        return "rate_limited"
    attempts = delivery.attempts + 1
    try:
        answer = notify.send(channel.kind, channel.target, alerts.message(delivery))
    except notify.DeliveryError as exc:
        final = self.request.retries >= self.max_retries
        AlertDelivery.objects.filter(pk=delivery.pk, status="pending").update(
            attempts=attempts, last_error=str(exc)[:1000], **({"status": "failed"} if final else {})
        )
        log.warning("alert %s to channel %s: attempt %d failed: %s", delivery.alert.key, channel.pk, attempts, exc)
        if final:
            return "failed"
        raise
    AlertDelivery.objects.filter(pk=delivery.pk, status="pending").update(
        status="sent", attempts=attempts, sent=timezone.now(), last_error=answer[:1000]
    )
    return "sent"


@shared_task(
    name=vocabulary.TASK_SLURM,
    ignore_result=True,
    autoretry_for=(slurm.SlurmError,),
    retry_backoff=10,
    retry_backoff_max=300,
    max_retries=5,
)
def slurm_actions(sweep_id):
    sweep = Sweep.objects.filter(pk=sweep_id, status="finished").first()
    if sweep is None:
        return []
    return slurm.act_on_sweep(sweep)
