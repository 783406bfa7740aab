"""A node's gpu check result (agents/gpu_contract.py): validated, checked against its row, stored once.

The result closes its ``GpuCheck`` row with a conditional UPDATE (only while the row is
open), so a duplicate, a replay or a result after the reaper closed the row changes
nothing. The sweep is advanced after the commit: the last check closes it.
"""

from __future__ import annotations

from django.db import transaction

from agents import contract, gpu_contract
from cluster_health.ingest.outcomes import FINAL, LATE
from cluster_health.ingest.rejects import other_sweep, reject
from cluster_health.models import OPEN_PAIR_STATUSES, GpuCheck
from cluster_health.shapes import broadcast
from cluster_health.sweeps import gpus, lifecycle


def is_gpu_result(payload) -> bool:
    return isinstance(payload, dict) and payload.get("kind") == gpu_contract.KIND


def ingest_gpu_result(payload) -> str:
    """Apply one node's gpu check result; returns the outcome (final, late, rejected)."""
    try:
        result = gpu_contract.validate_result(payload)
    except contract.ContractError as exc:
        return reject(contract.TASK_RESULT, payload, str(exc))
    with transaction.atomic():
        check = GpuCheck.objects.filter(pk=result["probe_id"]).select_related("node", "sweep").first()
        if check is None:
            return reject(contract.TASK_RESULT, payload, f"probe_id: no gpu check {result['probe_id']}")
        if error := other_sweep(result, check):
            return reject(contract.TASK_RESULT, payload, error)
        if result["node"] != check.node.name:
            return reject(
                contract.TASK_RESULT,
                payload,
                f"node: gpu check {check.pk} is {check.node.name}'s, not {result['node']}",
            )
        if check.status == "pending":  # no command for it has gone out: no genuine result can exist yet
            return reject(contract.TASK_RESULT, payload, f"probe_id: gpu check {check.pk} was not sent yet")
        if check.status not in OPEN_PAIR_STATUSES:
            return LATE
        fields = {k: result[k] for k in ("status", "stage", "reason", "hint")}
        if not gpus.close(check.pk, {**fields, "result": result}):
            return LATE  # closed meanwhile (the reaper, or the same result in another batch)
        broadcast.sweep_update(check.sweep)
    lifecycle.advance_or_fail(check.sweep_id)
    return FINAL
