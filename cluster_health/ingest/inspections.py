"""Nodes' reports of what they see of a hung job (agents.hangs): checked, then kept once per node."""

from __future__ import annotations

from django.db import IntegrityError, transaction

from agents import contract
from agents.hangs import contract as hangs_contract
from cluster_health.ingest.outcomes import APPLIED, DUPLICATE, LATE
from cluster_health.ingest.rejects import reject
from cluster_health.models import HangDiagnosis, HangReport
from cluster_health.sweeps import lifecycle


def record_report(payload) -> str:
    """Keep one node's report for its diagnosis (the first one counts; one for a finished diagnosis is late)."""
    try:
        report = hangs_contract.validate_report(payload)
    except contract.ContractError as exc:
        return reject(hangs_contract.TASK_INSPECTION, payload, str(exc))
    diagnosis = HangDiagnosis.objects.filter(pk=report["probe_id"]).first()
    if diagnosis is None:
        return reject(hangs_contract.TASK_INSPECTION, payload, f"probe_id: no hang diagnosis {report['probe_id']}")
    if report["node"] not in diagnosis.nodes:
        return reject(
            hangs_contract.TASK_INSPECTION,
            payload,
            f"node: {report['node']} was not asked to look (diagnosis {diagnosis.pk})",
        )
    if diagnosis.status == "finished":
        return LATE
    try:
        with transaction.atomic():
            HangReport.objects.create(
                diagnosis=diagnosis, node=report["node"], ranks=report["ranks"], error=report["error"] or ""
            )
    except IntegrityError:
        return DUPLICATE
    transaction.on_commit(lifecycle.start_queued)  # a sweep queued for this node's inspect may start now
    return APPLIED
