"""Celery tasks for actions, on queue "server": evaluate a finished sweep, deliver alerts, act on Slurm."""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import timedelta

from celery import shared_task
from django.conf import settings
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from cluster_health import vocabulary
from cluster_health.actions import alerts, bootstrap, notify, slurm
from cluster_health.actions.models import ActionOutbox, AlertDelivery
from cluster_health.models import Sweep
from cluster_health.queues import dispatch

log = logging.getLogger(__name__)


# A delivery task holds its row this long (a webhook call is bounded well below it).
DELIVERY_CLAIM_S = 120.0
# After a failed attempt the row waits for its retry: the longest backoff, with room.
DELIVERY_RETRY_WAIT_S = 960.0
# An action task sent this long ago and not done is sent again: past every retry of the Slurm task.
ACTION_RESEND_S = 900.0
# How long after its commit a sweep's action tasks may still be under way to the broker.
UNSENT_GRACE_S = 10.0


def sweep_finished(sweep_id: int) -> None:
    """Record the actions of a sweep finished in this transaction, and send them after its commit."""
    tasks = [vocabulary.TASK_AFTER_SWEEP] + ([vocabulary.TASK_SLURM] if settings.SLURM_ACTIONS != "off" else [])
    ActionOutbox.objects.bulk_create([ActionOutbox(sweep_id=sweep_id, task=task) for task in tasks])
    _send_after_commit(sweep_id)


def sweep_ended(sweep: Sweep) -> None:
    """A sweep that ended without finishing (failed, cancelled) in this transaction: when it held something
    (an idle sweep's Slurm hold), record its after-sweep action, sent after the commit, to give that back."""
    if not (sweep.params or {}).get("idle_hold"):
        return
    ActionOutbox.objects.get_or_create(sweep_id=sweep.pk, task=vocabulary.TASK_AFTER_SWEEP)
    _send_after_commit(sweep.pk)


def _send_after_commit(sweep_id: int) -> None:
    """Send a sweep's recorded actions not yet sent, once this transaction commits."""
    transaction.on_commit(lambda: _send_actions(ActionOutbox.objects.filter(sweep_id=sweep_id, sent__isnull=True)))


def _send_actions(rows) -> int:
    sent = 0
    for row in rows:
        dispatch.send_to_server(row.task, sweep_id=row.sweep_id)
        ActionOutbox.objects.filter(pk=row.pk).update(sent=timezone.now())
        sent += 1
    return sent


def _acted(sweep_id: int, task: str) -> None:
    ActionOutbox.objects.filter(sweep_id=sweep_id, task=task, done__isnull=True).update(done=timezone.now())


def _send_deliveries(ids: list[int]) -> None:
    for pk in ids:
        dispatch.send_to_server(vocabulary.TASK_DELIVER, delivery_id=pk)


def resend_lost(now=None) -> int:
    """Send again what a finished sweep's actions lost on the way: action tasks never sent (or sent long
    ago and never done), and pending deliveries no task holds. Called by the reaper; returns how many."""
    now = now or timezone.now()
    lost = ActionOutbox.objects.filter(done__isnull=True).filter(
        Q(sent__isnull=True, created__lt=now - timedelta(seconds=UNSENT_GRACE_S))
        | Q(sent__lt=now - timedelta(seconds=ACTION_RESEND_S))
    )
    resent = _send_actions(lost.order_by("pk")[:100])
    deliveries = list(
        AlertDelivery.objects.filter(status="pending", created__lt=now - timedelta(seconds=UNSENT_GRACE_S))
        .filter(Q(claimed_until__isnull=True) | Q(claimed_until__lt=now))
        .values_list("pk", flat=True)[:100]
    )
    _send_deliveries(deliveries)
    if resent or deliveries:
        log.warning("sent again %d action task(s) and %d alert deliveries lost on their way", resent, len(deliveries))
    return resent + len(deliveries)


@shared_task(name=vocabulary.TASK_AFTER_SWEEP, ignore_result=True)
def after_sweep(sweep_id):
    sweep = Sweep.objects.filter(pk=sweep_id, status__in=("finished", *ENDED_UNFINISHED)).first()
    if sweep is None:
        return 0
    if sweep.status in ENDED_UNFINISHED:  # nothing measured to act on: only what it held is given back
        for step in AFTER_ENDED:
            step(sweep)
        _acted(sweep_id, vocabulary.TASK_AFTER_SWEEP)
        return 0
    bootstrap.ensure_env_channels()
    after_sweep_operations(sweep)  # before the alerts: a node back in service is alerted on again
    with transaction.atomic():
        ids = alerts.evaluate_sweep(sweep)
        _acted(sweep_id, vocabulary.TASK_AFTER_SWEEP)
        transaction.on_commit(lambda: _send_deliveries(ids))
    return len(ids)


# What a finished sweep changes beside its alerts, each a function of the sweep returning what it did in
# words: pair coverage, operators' states, an idle hold released. Those modules stand above this floor
# (they request sweeps and read the Slurm actions), so they register here when the app is ready
# (cluster_health/apps.py) instead of being imported from below.
AFTER_SWEEP: list[Callable[[Sweep], list[str]]] = []
# The steps that also run for a sweep that ended without finishing: an idle sweep's hold released.
AFTER_ENDED: list[Callable[[Sweep], list[str]]] = []
ENDED_UNFINISHED = ("failed", "cancelled")


def after_sweep_operations(sweep: Sweep) -> list[str]:
    """What a finished sweep changes beside its alerts: each registered AFTER_SWEEP step, in order."""
    done: list[str] = []
    for step in AFTER_SWEEP:
        done += step(sweep)
    for line in done:
        log.info("sweep %s: %s", sweep.pk, line)
    return done


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
    now = timezone.now()
    claimed = (
        AlertDelivery.objects.filter(pk=delivery.pk, status="pending")
        .filter(Q(claimed_until__isnull=True) | Q(claimed_until__lt=now))
        .update(claimed_until=now + timedelta(seconds=DELIVERY_CLAIM_S))
    )
    if not claimed and not self.request.retries:
        return "claimed"  # another task holds it (the reaper sent it again meanwhile)
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
            attempts=attempts,
            last_error=str(exc)[:1000],
            claimed_until=timezone.now() + timedelta(seconds=DELIVERY_RETRY_WAIT_S),
            **({"status": "failed"} if final else {}),
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
    done = slurm.act_on_sweep(sweep)
    _acted(sweep_id, vocabulary.TASK_SLURM)
    return done
