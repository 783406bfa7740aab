"""The fleet's words for silence: how long a node has not been heard from, and who is missing. Pure: no Django."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta


def ago(delta: timedelta) -> str:
    """A short age: '40 s', '3 min', '5 h', '9 days'."""
    s = max(0.0, delta.total_seconds())
    if s < 90:
        return f"{s:.0f} s"
    if s < 90 * 60:
        return f"{s / 60:.0f} min"
    if s < 48 * 3600:
        return f"{s / 3600:.0f} h"
    return f"{s / 86400:.0f} days"


def describe_silence(last_heartbeat: datetime | None, now: datetime) -> str:
    """'last heartbeat 3 min ago (12:01:07 UTC)', with the date when it is not today's; or 'never heard from'."""
    if last_heartbeat is None:
        return "never heard from"
    utc = last_heartbeat.astimezone(UTC)
    when = (
        utc.strftime("%H:%M:%S UTC")
        if utc.date() == now.astimezone(UTC).date()
        else utc.strftime("%Y-%m-%d %H:%M:%S UTC")
    )
    return f"last heartbeat {ago(now - last_heartbeat)} ago ({when})"


def offline_hint(name: str, last_heartbeat: datetime | None, now: datetime) -> str:
    """A pair's or a group's hint for a member that was offline: 'n2 offline: last heartbeat ...'."""
    return f"{name} offline: {describe_silence(last_heartbeat, now)}"


# How a pair's hint names the side whose agent was not heard from (offline_hint, core/merge):
# "host5 offline: last heartbeat ...", "host5 stopped sending heartbeats", "...; host5 then stopped ...".
_GONE_IN_HINT = re.compile(r"^(?P<names>.+?) (?:offline:|(?:then )?stopped sending heartbeats)")


def gone_in_hint(hint: str | None) -> set[str]:
    """The nodes a pair's hint says were offline (their agent silent), by name."""
    gone: set[str] = set()
    for clause in (hint or "").split(";"):
        said = _GONE_IN_HINT.match(clause.strip())
        if said:
            gone.update(said["names"].split(" and "))
    return gone


def parse_time(value: str | None) -> datetime | None:
    """An ISO time as the sweep JSON writes it, or None."""
    return datetime.fromisoformat(value) if value else None
