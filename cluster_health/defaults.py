"""Rows every installation starts with: the operators group, the nightly sweep, the reaper.

Run after every ``migrate`` (post_migrate), idempotently. The nightly schedule is
created once and then belongs to the admin: disable it there rather than deleting
it, since a deleted one comes back on the next migrate. The reaper's interval
always follows settings.REAPER_INTERVAL_S because no sweep may stall without it.
"""

from __future__ import annotations

import json

from django.conf import settings

from agents import contract

OPERATORS_GROUP = "operators"
NIGHTLY_TASK_NAME = "nightly full sweep"
REAPER_TASK_NAME = "reaper"
PRUNE_TASK_NAME = "prune"


def ensure_operators_group():
    from django.contrib.auth.models import Group, Permission

    group, _ = Group.objects.get_or_create(name=OPERATORS_GROUP)
    perm = Permission.objects.filter(content_type__app_label="cluster_health", codename="start_sweep").first()
    if perm is not None:
        group.permissions.add(perm)
    return group


def _crontab_fields(expr: str) -> dict:
    parts = expr.split()
    if len(parts) != 5:
        raise ValueError(f"CLUSTER_HEALTH_NIGHTLY_CRON: {expr!r} is not a five-field cron expression")
    keys = ("minute", "hour", "day_of_month", "month_of_year", "day_of_week")
    return dict(zip(keys, parts))


def ensure_schedules():
    from django_celery_beat.models import CrontabSchedule, IntervalSchedule, PeriodicTask

    every = max(1, round(settings.REAPER_INTERVAL_S))
    interval, _ = IntervalSchedule.objects.get_or_create(every=every, period=IntervalSchedule.SECONDS)
    PeriodicTask.objects.update_or_create(
        name=REAPER_TASK_NAME,
        defaults={
            "task": contract.TASK_REAP,
            "interval": interval,
            "crontab": None,
            "enabled": True,
            "queue": "server",
            "expire_seconds": every * 5,
        },
    )
    if not PeriodicTask.objects.filter(name=PRUNE_TASK_NAME).exists():
        crontab, _ = CrontabSchedule.objects.get_or_create(
            **_crontab_fields(settings.PRUNE_CRON), timezone=settings.TIME_ZONE
        )
        PeriodicTask.objects.create(
            name=PRUNE_TASK_NAME,
            task=contract.TASK_PRUNE,
            crontab=crontab,
            queue="server",
            description="Retention: raw probe detail and rejected messages (manage.py prune).",
        )
    if not PeriodicTask.objects.filter(name=NIGHTLY_TASK_NAME).exists():
        crontab, _ = CrontabSchedule.objects.get_or_create(
            **_crontab_fields(settings.NIGHTLY_SWEEP_CRON), timezone=settings.TIME_ZONE
        )
        PeriodicTask.objects.create(
            name=NIGHTLY_TASK_NAME,
            task=contract.TASK_SCHEDULED_SWEEP,
            crontab=crontab,
            queue="server",
            kwargs=json.dumps({"kind": "full"}),
            description="Full sweep of every active node; its results feed the rolling baseline.",
        )


def on_post_migrate(sender, using="default", **kwargs):
    from django.db import DEFAULT_DB_ALIAS

    if using != DEFAULT_DB_ALIAS:
        return
    ensure_operators_group()
    ensure_schedules()
