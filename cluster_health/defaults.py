"""Rows every installation starts with: the operators group, the nightly sweep, the reaper.

Run after every ``migrate`` (post_migrate), idempotently. The nightly schedule is
created once and then belongs to the admin: disable it there rather than deleting
it, since a deleted one comes back on the next migrate. The reaper's interval
always follows settings.REAPER_INTERVAL_S because no sweep may stall without it.
"""

from __future__ import annotations

import json
from importlib import import_module

from django.apps import AppConfig
from django.conf import settings
from django.db import DEFAULT_DB_ALIAS
from django.db.models.signals import post_migrate

from cluster_health import vocabulary

OPERATORS_GROUP = "operators"
NIGHTLY_TASK_NAME = "nightly full sweep"
REAPER_TASK_NAME = "reaper"
PRUNE_TASK_NAME = "prune"


class ProjectAppConfig(AppConfig):
    """An app of this project: big integer keys, and the rows it starts with created after every migrate.

    defaults_module names a module whose ensure_defaults() creates those rows idempotently (by default the
    app's own defaults module). Subclass it as defaults.ProjectAppConfig: a config class imported into an
    apps module by name makes Django's choice of that app's config ambiguous.
    """

    default_auto_field = "django.db.models.BigAutoField"
    defaults_module = ""  # "": the app's NAME.defaults

    def ready(self):
        # Runs after auth's own handler has created the permissions (start_sweep) the defaults grant.
        post_migrate.connect(self.create_defaults, sender=self, dispatch_uid=f"{self.name}.defaults")

    def create_defaults(self, sender, using=DEFAULT_DB_ALIAS, **kwargs):
        if using == DEFAULT_DB_ALIAS:
            import_module(self.defaults_module or f"{self.name}.defaults").ensure_defaults()


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
    from django_celery_beat.models import IntervalSchedule, PeriodicTask

    every = max(1, round(settings.REAPER_INTERVAL_S))
    interval, _ = IntervalSchedule.objects.get_or_create(every=every, period=IntervalSchedule.SECONDS)
    PeriodicTask.objects.update_or_create(
        name=REAPER_TASK_NAME,
        defaults={
            "task": vocabulary.TASK_REAP,
            "interval": interval,
            "crontab": None,
            "enabled": True,
            "queue": "server",
            "expire_seconds": every * 5,
        },
    )
    create_task_once(
        PRUNE_TASK_NAME,
        settings.PRUNE_CRON,
        task=vocabulary.TASK_PRUNE,
        description="Retention: raw probe detail and rejected messages (manage.py prune).",
    )
    create_task_once(
        NIGHTLY_TASK_NAME,
        settings.NIGHTLY_SWEEP_CRON,
        task=vocabulary.TASK_SCHEDULED_SWEEP,
        kwargs=json.dumps({"kind": "full"}),
        description="Full sweep of every active node; its results feed the rolling baseline.",
    )


def create_task_once(name: str, cron: str | None = None, **fields) -> None:
    """Create a periodic task on the server queue unless one of that name exists (from then on the admin owns it).

    cron: a five-field expression for its crontab, made only when the task is; else fields name its interval.
    """
    from django_celery_beat.models import CrontabSchedule, PeriodicTask

    if PeriodicTask.objects.filter(name=name).exists():
        return
    if cron is not None:
        fields["crontab"], _ = CrontabSchedule.objects.get_or_create(
            **_crontab_fields(cron), timezone=settings.TIME_ZONE
        )
    PeriodicTask.objects.create(name=name, queue="server", **fields)


def ensure_defaults():
    """Every row this app starts with (run after each migrate by the app's config)."""
    ensure_operators_group()
    ensure_schedules()
