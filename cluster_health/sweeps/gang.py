"""A gang check before a job starts (``manage.py sweep --slurm-job ID`` from PrologSlurmctld).

A quick sweep of the job's allocated nodes, answered within the prolog's time. Exit 2
(Slurm requeues the job; the sweep's own Slurm actions drain the culprit) only for
confirmed faults, the same evidence that drains (cluster_health/actions/blame.py). Anything
else, and every trouble of the server's own (slurmctld, the database or the broker away, a
sweep that did not end in time), lets the job start: exit 0 with a warning on stderr.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from cluster_health.actions import blame, slurm
from cluster_health.models import Node, Sweep
from cluster_health.sweeps import waiting

ALLOCATED_STATES = ("CONFIGURING", "RUNNING")  # in PrologSlurmctld the job is CONFIGURING
FAULT, PASS = 2, 0
CANCEL_MARGIN_S = 2.0  # of the timeout, kept for cancelling a sweep that did not end


def check(job_id: str, kind: str, timeout: float, warn: Callable[[str], None], say: Callable[[str], None]) -> int:
    """Run the gang check of one job; the exit code (2 confirmed faults, else 0)."""
    began = time.monotonic()
    sweep = None
    try:
        sweep = _request(job_id, kind, warn)
        if sweep is None:
            return PASS
        left = timeout - (time.monotonic() - began) - CANCEL_MARGIN_S
        if not waiting.wait_for(sweep, max(0.0, left)):
            _cancel(sweep)
            warn(f"gang check: sweep #{sweep.pk} did not end within {timeout:.0f}s; the job starts unchecked")
            return PASS
        if sweep.status != "finished":
            warn(f"gang check: sweep #{sweep.pk} {sweep.status} ({sweep.error[:200]}); the job starts unchecked")
            return PASS
        faults = [b for b in blame.confirmed_findings(sweep) if b.code not in slurm.NEVER_DRAINS]
        if faults:
            for fault in faults:
                say(f"gang check: sweep #{sweep.pk}: {fault.code} {fault.subject}: {fault.text}")
            return FAULT
        if sweep.verdict != "pass":
            warn(f"gang check: sweep #{sweep.pk} {sweep.verdict}, nothing confirmed: the job starts")
        else:
            say(f"gang check: sweep #{sweep.pk} passed {len(sweep.nodes)} nodes")
        return PASS
    except Exception as exc:  # the server's own trouble (database, broker, slurmctld): never a reason to fail a job
        if sweep is not None:
            _cancel(sweep)
        warn(f"gang check of job {job_id}: {type(exc).__name__}: {str(exc)[:300]}; the job starts unchecked")
        return PASS


def _request(job_id: str, kind: str, warn: Callable[[str], None]) -> Sweep | None:
    """The sweep of the job's nodes that are ours and in service; None (warned) when there is nothing to check."""
    from cluster_health.sweeps.request import request_sweep

    try:
        allocated = slurm.job_nodes(job_id, ALLOCATED_STATES)
    except slurm.SlurmError as exc:
        warn(f"gang check: {exc}; the job starts unchecked")
        return None
    nodes = Node.objects.filter(active=True).values_list("name", "state")
    ours = slurm.ours_by_slurm_name(name for name, _ in nodes)
    state = dict(nodes)
    names = [ours[n] for n in allocated if n in ours and state[ours[n]] == "service"]
    left = sorted(set(allocated) - {n for n in allocated if n in ours and state[ours[n]] == "service"})
    if left:
        warn(f"gang check: not checked (not registered, retired or in maintenance here): {', '.join(left[:20])}")
    if len(names) < 2:
        warn(f"gang check: job {job_id} has {len(names)} node(s) to check: no pair to probe")
        return None
    # A quick check prefers the pairs measured longest ago: the checks before jobs then also cover pairs of busy
    # nodes, which idle-gap sweeps reach last (docs/OPERATIONS.md, "Idle-gap sweeps and coverage").
    prefer = {"stalest_first": True} if kind == "quick" else {}
    # Within the prolog's time: the second look comes at once, whatever wait the fleet's sweeps take.
    return request_sweep(
        source="command", kind=kind, nodes=names, marks={"slurm_job": job_id}, confirm_after_s=0, **prefer
    )


def _cancel(sweep: Sweep) -> None:
    from cluster_health import sweeps

    try:
        sweeps.cancel(sweep.pk)
    except Exception:  # the database is what failed: the reaper and the sweep's deadlines end it
        pass
