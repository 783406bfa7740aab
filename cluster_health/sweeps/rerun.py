"""Probing again what a sweep found wrong: its failed or suspect pairs, a finding's pairs, or one pair.

A re-run is a new ``pairs`` sweep of exactly those pairs, requested through ``request_sweep`` (the
path ``manage.py sweep --kind pairs`` takes) with the first sweep's backend and probe settings, so
the second look measures what the first did. Each is written in the audit log with who asked.
"""

from __future__ import annotations

from django.db import transaction

from cluster_health import vocabulary
from cluster_health.models import AuditEntry, Finding, PairProbe, Sweep
from cluster_health.sweeps.request import SweepRequestError, request_sweep

# Pairs a re-run takes: those that did not work, were slow, or were cleared only by a second look.
RERUN_STATUSES = (*vocabulary.BAD_STATUSES, "degraded", *vocabulary.CONFIRMATION_STATUSES)
# The first sweep's probe settings a re-run keeps.
CARRIED = ("sizes", "timeouts", "iterations", "warmup", "latency_iterations", "deadline_s", "last_stage")
MAX_LISTED = 8  # pairs named in the audit entry's text; the rest are counted


def suspect_pairs(sweep: Sweep) -> list[list[str]]:
    """The sweep's pairs that failed or are suspect, as [a, b] names in round order."""
    rows = PairProbe.objects.filter(sweep=sweep, status__in=RERUN_STATUSES).order_by("round", "id")
    return [[a, b] for a, b in rows.values_list("node_a__name", "node_b__name")]


def finding_pairs(finding: Finding) -> list[list[str]]:
    """The pairs a finding rests on, or the link it names."""
    names = finding.pairs or ([finding.subject] if "<->" in finding.subject else [])
    return [name.split("<->", 1) for name in names if "<->" in name]


def rerun(sweep: Sweep, pairs: list[list[str]], *, source: str, user=None) -> Sweep:
    """Request a ``pairs`` sweep of ``pairs`` as ``sweep`` probed them, and audit it; SweepRequestError if refused."""
    if not pairs:
        raise SweepRequestError(f"pairs: sweep #{sweep.pk} has no failed or suspect pair to probe again")
    carried = {k: sweep.params[k] for k in CARRIED if sweep.params.get(k) is not None}
    listed = ", ".join(f"{a}<->{b}" for a, b in pairs[:MAX_LISTED])
    more = f" and {len(pairs) - MAX_LISTED} more" if len(pairs) > MAX_LISTED else ""
    with transaction.atomic():
        again = request_sweep(kind="pairs", backend=sweep.backend, pairs=pairs, source=source, user=user, **carried)
        AuditEntry.objects.create(
            actor=user.get_username() if user is not None and user.is_authenticated else "",
            source=source,
            action="sweep_start",
            subject=f"sweep #{again.pk}",
            text=f"re-run of {len(pairs)} pair(s) of sweep #{sweep.pk}: {listed}{more}",
            sweep=again,
        )
    return again
