"""Group-probe halves (group collective, launch rehearsal): stored per rank, closed when every rank is in."""

from __future__ import annotations

from django.db import transaction

from agents import contract
from cluster_health.core import merge
from cluster_health.ingest.outcomes import APPLIED, DUPLICATE, FINAL, LATE
from cluster_health.ingest.rejects import other_sweep, reject
from cluster_health.models import OPEN_PAIR_STATUSES, GroupProbe
from cluster_health.sweeps import closing, lifecycle


def ingest_group(result: dict, payload) -> str:
    """Store one rank's half of a group probe; the last rank's half closes it."""
    with transaction.atomic():
        group = GroupProbe.objects.select_for_update().filter(pk=result["probe_id"]).first()
        if group is None or group.kind != result["kind"]:
            return reject(contract.TASK_RESULT, payload, f"probe_id: no {result['kind']} probe {result['probe_id']}")
        if error := other_sweep(result, group):
            return reject(contract.TASK_RESULT, payload, error)
        rank = result["rank"]
        if rank >= len(group.nodes) or group.nodes[rank] != result["node"]:
            return reject(
                contract.TASK_RESULT, payload, f"rank: {result['node']} is not rank {rank} of group probe {group.pk}"
            )
        if group.status == "pending":  # no command for it has gone out: no genuine half can exist yet
            return reject(contract.TASK_RESULT, payload, f"probe_id: group probe {group.pk} was not sent yet")
        if group.status not in OPEN_PAIR_STATUSES:
            return LATE
        if str(rank) in group.halves:
            return DUPLICATE
        group.halves[str(rank)] = result
        GroupProbe.objects.filter(pk=group.pk).update(halves=group.halves)
        if len(group.halves) < len(group.nodes):
            return APPLIED
        closing.close_group(group, merge.merge_many(list(group.halves.values())))
    lifecycle.advance_or_fail(group.sweep_id)
    return FINAL
