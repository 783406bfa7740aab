"""A ``gpu`` sweep's checks: one row per node, all sent at once, closed by the node's result or the reaper.

A gpu sweep has no pairs and no rounds of them: its one round is every node's
local GPU check (agents/gpu_check.py), each a ``GpuCheck`` row. A node offline
when the round starts closes ``offline`` at once; the others are sent their
signed command after the commit. Every close is conditional on the row being
open, so a result and the reaper racing close a check once.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta

from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from agents import gpu_findings
from cluster_health.core.finding_row import finding
from cluster_health.models import OPEN_PAIR_STATUSES, GpuCheck, Node, Sweep
from cluster_health.queues import dispatch
from cluster_health.shapes import broadcast

# A finding of the gpu rules gets this code: "gpu_check" from a node's own check result,
# "gpu_facts" from the NVML facts its heartbeats carry. Both are about that node alone.
CHECK_CODE = "gpu_check"
FACTS_CODE = "gpu_facts"


def create_checks(sweep: Sweep, names: list[str]) -> None:
    """The sweep's pending rows, one per node."""
    node_ids = dict(Node.objects.filter(name__in=names).values_list("name", "pk"))
    GpuCheck.objects.bulk_create([GpuCheck(sweep=sweep, node_id=node_ids[n]) for n in names])


def gpu_count(facts: dict | None) -> int:
    """How many GPUs a node's last facts list (0 when none, or an older agent)."""
    return len(gpu_findings.gpu_facts(facts).get("devices") or [])


def dispatch_checks(sweep: Sweep, online: set[str], now: datetime, offline_hint: Callable[[list[str]], str]) -> bool:
    """Mark the sweep's pending checks running (or offline) and send their commands after the commit.
    True if any is open."""
    commands: list[dict] = []
    running: list[int] = []
    for check in GpuCheck.objects.filter(sweep=sweep, status="pending").select_related("node"):
        name = check.node.name
        if name not in online:
            GpuCheck.objects.filter(pk=check.pk, status="pending").update(
                status="offline", reason="agent_offline", hint=offline_hint([name]), finished=now
            )
            continue
        cmd = dispatch.build_gpu_command(check.pk, sweep.pk, name, sweep.params, gpu_count(check.node.facts))
        wait = timedelta(seconds=dispatch.server_deadline_s(cmd["deadline_s"]))
        if GpuCheck.objects.filter(pk=check.pk, status="pending").update(
            status="running", started=now, deadline=now + wait
        ):
            commands.append(cmd)
            running.append(check.pk)
    transaction.on_commit(lambda: dispatch.send_probe_commands(GpuCheck, running, commands))
    broadcast.sweep_update(sweep)
    return bool(running)


def any_open(sweep: Sweep) -> bool:
    return GpuCheck.objects.filter(sweep=sweep, status__in=OPEN_PAIR_STATUSES).exists()


def close(check_id: int, fields: dict, now: datetime | None = None) -> bool:
    """Write a check's final fields (status, stage, reason, hint, result) once, while it is open."""
    return bool(
        GpuCheck.objects.filter(pk=check_id, status__in=OPEN_PAIR_STATUSES).update(
            finished=now or timezone.now(), **fields
        )
    )


def reap(now: datetime, offline_ids: set[int], waiting: set[int], counts: dict) -> set[int]:
    """Close running checks past their deadline (``timeout``) or of a silent node (``offline``), counted
    in ``counts["gpu_checks"]``; returns the sweeps touched. ``waiting``: checks whose result is on its
    way to the server."""
    touched: set[int] = set()
    due = (
        GpuCheck.objects.filter(status="running")
        .filter(Q(deadline__lt=now) | Q(node_id__in=offline_ids))
        .exclude(pk__in=waiting)
        .select_related("node")
    )
    for check in due:
        if check.node_id in offline_ids:
            fields = {
                "status": "offline",
                "reason": "agent_offline",
                "hint": f"{check.node.name} went offline during its gpu check",
            }
        else:
            fields = {
                "status": "timeout",
                "reason": "gpu_error",
                "hint": f"{check.node.name} sent no gpu check result by its deadline (a GPU hung, or the agent)",
            }
        if close(check.pk, fields, now):
            counts["gpu_checks"] += 1
            touched.add(check.sweep_id)
    return touched


def resend_unsent(now: datetime, cutoff: datetime) -> int:
    """Send again the commands of checks committed running but never marked sent (a worker died in between)."""
    resent = 0
    for check in GpuCheck.objects.filter(status="running", sent_at__isnull=True, started__lt=cutoff).select_related(
        "sweep", "node"
    ):
        cmd = dispatch.build_gpu_command(
            check.pk, check.sweep_id, check.node.name, check.sweep.params, gpu_count(check.node.facts)
        )
        wait = timedelta(seconds=dispatch.server_deadline_s(cmd["deadline_s"]))
        with transaction.atomic():
            if GpuCheck.objects.filter(pk=check.pk, status="running", sent_at__isnull=True).update(
                started=now, deadline=now + wait
            ):
                transaction.on_commit(lambda pk=check.pk, c=cmd: dispatch.send_probe_commands(GpuCheck, [pk], [c]))
                resent += 1
    return resent


def as_findings(found: list[gpu_findings.Finding], code: str) -> list[dict]:
    return [finding(f["severity"], code, f["subject"], f["text"]) for f in found]


def fleet_findings(facts: dict[str, dict]) -> list[dict]:
    """The fleet GPU findings from the nodes' NVML facts (driver, ECC, rows, PCIe, NVLink, counts)."""
    return as_findings(gpu_findings.fleet_findings(facts), FACTS_CODE)


def check_findings(sweep: Sweep) -> tuple[list[dict], list[str]]:
    """A gpu sweep's findings from its closed checks, and each check's status for the verdict.

    A check the server closed itself (timeout, offline) has no result from the node: its
    status, reason and hint stand in for one. A node without a GPU (``skipped``, ``no_gpu``)
    passed its check: a fleet of CPU nodes passes a gpu sweep rather than reading unknown.
    """
    results = {}
    statuses = []
    for name, status, stage, reason, hint, result in GpuCheck.objects.filter(sweep=sweep).values_list(
        "node__name", "status", "stage", "reason", "hint", "result"
    ):
        statuses.append("ok" if status == "skipped" and reason == "no_gpu" else status)
        results[name] = result or {"status": status, "stage": stage, "reason": reason, "hint": hint, "devices": []}
    return as_findings(gpu_findings.check_findings(results), CHECK_CODE), statuses
