"""Two sweeps side by side: the Compare page and its diff, and the pre-maintenance report."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.core.exceptions import BadRequest
from django.http import JsonResponse
from django.shortcuts import get_object_or_404, render
from django.utils import timezone
from django.views.decorators.cache import never_cache

from agents import contract
from cluster_health.core import matrix
from cluster_health.models import Sweep
from cluster_health.shapes.compare import diff as sweep_diff
from cluster_health.sweeps import waiting
from cluster_health.web.heavy import heavy
from cluster_health.web.views.sweeps import problem_rows, sweep_matrix


def _get_sweep_param(request, name):
    """A sweep named by id in the query string; 400 for anything but ASCII digits ("²" passes isdigit)."""
    raw = request.GET.get(name, "")
    if not raw:
        return None
    if not (raw.isascii() and raw.isdecimal() and len(raw) <= 18):
        raise BadRequest(f"{name}: {raw[:40]!r} is not a sweep id")
    return get_object_or_404(Sweep, pk=int(raw))


def default_comparison() -> tuple[Sweep | None, Sweep | None]:
    """The Compare page's pair with nothing chosen: the latest two closed sweeps, older first."""
    latest = list(Sweep.objects.exclude(status__in=Sweep.OPEN_STATUSES).order_by("-created")[:2])
    return (latest[1], latest[0]) if len(latest) == 2 else (None, None)


@login_required
def compare(request):
    before, after = _get_sweep_param(request, "a"), _get_sweep_param(request, "b")
    if before is None and after is None:
        before, after = default_comparison()
    same = before is not None and after is not None and before.pk == after.pk  # nothing to compare, say so
    diff = sweep_diff(sweep_matrix(before), sweep_matrix(after)) if before and after and not same else None
    recent = Sweep.objects.exclude(status__in=Sweep.OPEN_STATUSES).order_by("-created")[:200]
    return render(
        request,
        "cluster_health/compare.html",
        {
            "before": before,
            "after": after,
            "same": same,
            "diff": diff,
            "recent": recent,
        },
    )


@login_required
@never_cache
@heavy
def compare_state(request):
    before, after = _get_sweep_param(request, "a"), _get_sweep_param(request, "b")
    if not (before and after):
        return JsonResponse({"error": "a and b: two sweep ids are required"}, status=400)
    return JsonResponse(sweep_diff(sweep_matrix(before), sweep_matrix(after)))


# The report's table lists every pair status, most severe first, with 0 where none had it.
REPORT_STATUS_ORDER = sorted(matrix.STATUS_CODES, key=lambda s: (-contract.STATUS_SEVERITY.get(s, -1), s != "untested"))


def go_no_go(sweep: Sweep) -> tuple[bool, str]:
    """The maintenance window's gate, by the rule of ``manage.py sweep --wait``'s exit code: go only on 0."""
    code = waiting.exit_code(sweep)
    if code == 0:
        return True, f"GO: sweep #{sweep.pk} passed (exit code 0)."
    if sweep.status != "finished":
        return False, f"NO-GO: sweep #{sweep.pk} did not finish ({sweep.status}; exit code 3)."
    return False, f"NO-GO: sweep #{sweep.pk}'s verdict is {sweep.verdict} (exit code {code}); see the findings below."


@login_required
@heavy
def report(request, sweep_id: int):
    """Pre-maintenance report: this sweep (after) against an earlier one (before), printable."""
    after = get_object_or_404(Sweep, pk=sweep_id)
    before = _get_sweep_param(request, "before") or (
        Sweep.objects.filter(status="finished", created__lt=after.created).order_by("-created").first()
    )
    after_matrix = sweep_matrix(after)  # each sweep's matrix decoded once for the diff and the counts
    before_matrix = sweep_matrix(before) if before else None
    diff = sweep_diff(before_matrix, after_matrix) if before_matrix else None
    after_counts = matrix.status_counts(after_matrix)
    before_counts = matrix.status_counts(before_matrix) if before_matrix else None
    go, gate = go_no_go(after)
    findings = list(after.findings.all())
    return render(
        request,
        "cluster_health/report.html",
        {
            "after": after,
            "before": before,
            "diff": diff,
            "go": go,
            "gate": gate,
            "counts": [
                (status, (before_counts or {}).get(status, 0), after_counts.get(status, 0))
                for status in REPORT_STATUS_ORDER
            ],
            "findings": findings,
            "problems": problem_rows(after, findings),
            "baseline": after.baseline,
            "now": timezone.now(),
        },
    )
