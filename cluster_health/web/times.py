"""Times on every page, in one format: absolute with the zone, and ages the browser keeps current.

``{{ t|when }}`` is ``2026-11-25 22:51:01 UTC`` (24-hour, in TIME_ZONE, the zone named) inside a
``<time datetime>``; ``{{ t|ago }}`` is an age ("12 s ago") with the absolute time as its title.
Registered as a template builtin (settings.TEMPLATES), so no page loads it. Ages are worded here
against the server's clock as the page is made, and then re-worded every second in the browser by
cluster_health/static/cluster_health/times.js against that same clock (the page's ``server-now``),
so every age on a page agrees with the others and none is frozen at render time.
"""

from __future__ import annotations

from datetime import datetime

from django import template
from django.utils import timezone
from django.utils.dateformat import format as date_format
from django.utils.html import format_html

from cluster_health.core import fleet

register = template.Library()

FORMAT = "Y-m-d H:i:s T"  # the one format; the admin's (cluster_health/web/formats) is the same


def absolute(value: datetime) -> str:
    """``2026-11-25 22:51:01 UTC``: the deployment's zone (TIME_ZONE), named."""
    return date_format(timezone.localtime(value), FORMAT)


def plot_time(value: datetime) -> str:
    """The wall time in TIME_ZONE, ``2026-11-25 22:51:01``, for a figure's time axis (named by zone_name)."""
    return timezone.localtime(value).strftime("%Y-%m-%d %H:%M:%S")


def zone_name(value: datetime) -> str:
    """The zone's abbreviation at that time (``UTC``, ``CET``)."""
    return date_format(timezone.localtime(value), "T")


@register.filter
def when(value: datetime | None, empty: str = "–"):
    """An absolute time with its zone, in a ``<time>`` element; ``empty`` (a dash) for none."""
    if value is None:
        return empty
    return format_html('<time datetime="{}">{}</time>', value.isoformat(), absolute(value))


@register.filter
def ago(value: datetime | None, empty: str = "never"):
    """An age kept current in the browser ("12 s ago"), the absolute time as its title; ``empty`` for none."""
    if value is None:
        return empty
    return format_html(
        '<time datetime="{}" data-ago title="{}">{} ago</time>',
        value.isoformat(),
        absolute(value),
        fleet.ago(timezone.now() - value),
    )


@register.simple_tag
def server_now() -> str:
    """The server's clock as the page is made: the one clock every age on the page is counted from."""
    return timezone.now().isoformat()
