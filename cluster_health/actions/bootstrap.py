"""Rows the actions start with: alert channels from CLUSTER_HEALTH_ALERT_WEBHOOKS, the offline check."""

from __future__ import annotations

from urllib.parse import urlsplit

from django.conf import settings

from cluster_health import vocabulary
from cluster_health.defaults import create_task_once

OFFLINE_TASK_NAME = "alerts: offline agents"
OFFLINE_CHECK_EVERY_S = 60


def channel_for(entry: str) -> tuple[str, str, str]:
    """(kind, target, name) for one CLUSTER_HEALTH_ALERT_WEBHOOKS entry."""
    if entry.startswith("mailto:"):
        return "email", entry.removeprefix("mailto:"), f"e-mail {entry.removeprefix('mailto:')}"
    if entry.startswith("slack+"):
        url = entry.removeprefix("slack+")
        return "slack", url, f"slack {urlsplit(url).hostname}"
    return "webhook", entry, f"webhook {urlsplit(entry).hostname}"  # the host only: paths carry tokens


def ensure_env_channels() -> None:
    """Create a channel per configured entry once; later the admin owns it (disable it there)."""
    from cluster_health.actions.models import AlertChannel

    for entry in settings.ALERT_WEBHOOKS:
        kind, target, name = channel_for(entry)
        AlertChannel.objects.get_or_create(kind=kind, target=target, defaults={"name": name, "from_env": True})


def ensure_offline_schedule() -> None:
    from django_celery_beat.models import IntervalSchedule

    interval, _ = IntervalSchedule.objects.get_or_create(every=OFFLINE_CHECK_EVERY_S, period=IntervalSchedule.SECONDS)
    create_task_once(
        OFFLINE_TASK_NAME,
        interval=interval,
        task=vocabulary.TASK_OFFLINE,
        expire_seconds=OFFLINE_CHECK_EVERY_S,
        description="Alert when an agent stays silent past CLUSTER_HEALTH_ALERT_OFFLINE_AFTER_S.",
    )


def ensure_defaults() -> None:
    """Every row the actions start with (run after each migrate by the app's config)."""
    ensure_env_channels()
    ensure_offline_schedule()
