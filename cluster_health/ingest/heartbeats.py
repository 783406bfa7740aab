"""Heartbeats: a node registers or refreshes itself (name, address, facts)."""

from __future__ import annotations

from django.utils import timezone

from agents import contract
from cluster_health.ingest.outcomes import APPLIED
from cluster_health.ingest.rejects import reject
from cluster_health.models import Node


def record_heartbeat(payload) -> str:
    """Register or refresh a node from its heartbeat (name, address, facts)."""
    try:
        hb = contract.validate_heartbeat(payload)
    except contract.ContractError as exc:
        return reject(contract.TASK_HEARTBEAT, payload, str(exc))
    fields = {
        "address": hb["address"],
        "facts": hb["facts"],
        "agent_version": hb["agent_version"] or "",
        "busy": hb["busy"],
        "last_heartbeat": timezone.now(),
    }
    # A known node (every heartbeat but its first) is one UPDATE, not a locked read and a write.
    if not Node.objects.filter(name=hb["node"]).update(**fields):
        Node.objects.update_or_create(name=hb["node"], defaults=fields)
    return APPLIED
