"""Heartbeats: a node registers or refreshes itself (name, address, facts)."""

from __future__ import annotations

from django.utils import timezone

from agents import contract
from cluster_health import bulk
from cluster_health.ingest.outcomes import APPLIED
from cluster_health.ingest.rejects import reject
from cluster_health.models import Node


def _fields(hb: dict) -> dict:
    """What a checked heartbeat sets on its node's row (the time aside)."""
    return {
        "address": hb["address"],
        "facts": hb["facts"],
        "agent_version": hb["agent_version"] or "",
        "busy": hb["busy"],
    }


def record_heartbeat(payload) -> str:
    """Register or refresh a node from its heartbeat (name, address, facts)."""
    try:
        hb = contract.validate_heartbeat(payload)
    except contract.ContractError as exc:
        return reject(contract.TASK_HEARTBEAT, payload, str(exc))
    fields = {**_fields(hb), "last_heartbeat": timezone.now()}
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
    latest: dict[str, dict] = {}
    for payload in payloads:
        try:
            hb = contract.validate_heartbeat(payload)
        except contract.ContractError as exc:
            outcomes.append(reject(contract.TASK_HEARTBEAT, payload, str(exc)))
            continue
        latest[hb["node"]] = _fields(hb)
        outcomes.append(APPLIED)
    now = timezone.now()
    known = dict(Node.objects.filter(name__in=latest).values_list("name", "pk"))
    bulk.conditional_update(Node, {pk: latest[name] for name, pk in known.items()}, constants={"last_heartbeat": now})
    for name in latest.keys() - known.keys():
        Node.objects.update_or_create(name=name, defaults={**latest[name], "last_heartbeat": now})
    return outcomes
