"""Heartbeats: a node registers or refreshes itself (name, address, facts)."""

from __future__ import annotations

from datetime import datetime

from django.utils import timezone

from agents import contract
from cluster_health import bulk
from cluster_health.ingest.outcomes import APPLIED
from cluster_health.ingest.rejects import reject
from cluster_health.models import Node

# A heartbeat that waited in a queue reads the node's clock as behind by the wait; the offset kept
# is the largest recent one, let down by at most this much a second (a clock really stepped back
# is followed in minutes; a queue's hiccup barely moves it).
OFFSET_LET_DOWN_PER_S = 0.1
OFFSET_FORGET_S = 120.0  # a node silent this long starts its offset afresh


def _fields(hb: dict, now: datetime, before: tuple[float | None, datetime | None] = (None, None)) -> dict:
    """What a checked heartbeat sets on its node's row (the time aside): ``now`` by the server's clock,
    ``before`` the row's offset and last heartbeat."""
    return {
        "address": hb["address"],
        "facts": hb["facts"],
        "agent_version": hb["agent_version"] or "",
        "busy": hb["busy"],
        "clock_offset_s": _offset(hb.get("sent_at"), now, *before),
    }


def _offset(sent_at: float | None, now: datetime, previous: float | None, last: datetime | None) -> float | None:
    """The node's clock minus the server's: this heartbeat's reading, or the recent larger one let down."""
    if sent_at is None:
        return previous
    measured = sent_at - now.timestamp()
    if previous is None or last is None or (now - last).total_seconds() > OFFSET_FORGET_S:
        return round(measured, 3)
    let_down = previous - OFFSET_LET_DOWN_PER_S * max(0.0, (now - last).total_seconds())
    return round(max(measured, let_down), 3)


def record_heartbeat(payload) -> str:
    """Register or refresh a node from its heartbeat (name, address, facts)."""
    try:
        hb = contract.validate_heartbeat(payload)
    except contract.ContractError as exc:
        return reject(contract.TASK_HEARTBEAT, payload, str(exc))
    now = timezone.now()
    before = Node.objects.filter(name=hb["node"]).values_list("clock_offset_s", "last_heartbeat").first()
    fields = {**_fields(hb, now, before or (None, None)), "last_heartbeat": now}
    # A known node (every heartbeat but its first) is one UPDATE, not a locked read and a write.
    if not Node.objects.filter(name=hb["node"]).update(**fields):
        Node.objects.update_or_create(name=hb["node"], defaults=fields)
    return APPLIED


def record_heartbeats(payloads: list) -> list[str]:
    """Many heartbeats (an ingest consumer's batch, oldest first); one outcome per payload, in order.

    Every known node is refreshed by one UPDATE for the whole batch (a 1,024-node fleet sends
    about 200 heartbeats a second); a node's first heartbeat registers it on its own. When a
    node's heartbeat appears twice, the later one is what its row keeps. What the database
    refuses raises (the caller then applies the heartbeats one at a time).
    """
    outcomes: list[str] = []
    checked: dict[str, dict] = {}
    for payload in payloads:
        try:
            hb = contract.validate_heartbeat(payload)
        except contract.ContractError as exc:
            outcomes.append(reject(contract.TASK_HEARTBEAT, payload, str(exc)))
            continue
        checked[hb["node"]] = hb
        outcomes.append(APPLIED)
    now = timezone.now()
    rows = list(Node.objects.filter(name__in=checked).values_list("name", "pk", "clock_offset_s", "last_heartbeat"))
    known = {name: pk for name, pk, _, _ in rows}
    before = {name: (offset, last) for name, _, offset, last in rows}
    latest = {name: _fields(hb, now, before.get(name, (None, None))) for name, hb in checked.items()}
    bulk.conditional_update(Node, {pk: latest[name] for name, pk in known.items()}, constants={"last_heartbeat": now})
    for name in latest.keys() - known.keys():
        Node.objects.update_or_create(name=name, defaults={**latest[name], "last_heartbeat": now})
    return outcomes
