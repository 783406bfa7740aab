"""Sweep pages: one sweep live (its page and ``state.json``), the history, starting and cancelling one."""

from __future__ import annotations

import json

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required, permission_required
from django.core.exceptions import BadRequest
from django.core.paginator import Paginator
from django.http import HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_POST

from cluster_health import sweeps, vocabulary
from cluster_health.models import Finding, GroupProbe, PairProbe, Sweep
from cluster_health.shapes import documents, gpus, matrices, scales
from cluster_health.sweeps import rerun
from cluster_health.web import times
from cluster_health.web.forms import HistoryFilterForm, StartSweepForm


def sweep_matrix(sweep: Sweep) -> dict:
    """The matrix payload of a sweep (stored once the sweep is closed, since it no longer changes)."""
    return json.loads(matrices.matrix_text(sweep))


@login_required
@never_cache
def sweep_state(request, sweep_id: int):
    """Everything a sweep page draws, in one response: summary, progress, findings, and its node matrix,
    or past CLUSTER_HEALTH_NODE_MATRIX_MAX_NODES its group matrix instead (``matrix`` is then null)."""
    sweep = get_object_or_404(Sweep, pk=sweep_id)
    summary = documents.sweep_json(sweep, with_pairs=False, with_progress=True)
    summary["node_matrix_max_nodes"] = settings.NODE_MATRIX_MAX_NODES
    # Beside an open sweep, the page keeps the last complete one readable (its matrix and findings).
    summary["last_complete"] = _last_complete(before=sweep.created) if sweep.is_open else None
    # The throughput view's colour scale runs from 0 to this, so a healthy sweep reads as healthy.
    summary["expected_busbw_gbps"] = scales.expected_busbw(sweep)
    summary["finished_text"] = times.absolute(sweep.finished) if sweep.finished else None  # "ended ..."
    # The group collectives' table: drawn live as the sweep's group round closes (a handful of rows).
    # ("groups" is the group matrix's key below: the collectives have a name of their own.)
    summary["group_collectives"] = [documents.group_dict(g) for g in GroupProbe.objects.filter(sweep=sweep)]
    if matrices.node_matrix_shown(sweep):
        summary["grouped"] = matrices.has_groups(sweep)
        views = {"matrix": matrices.matrix_text(sweep)}
    else:  # the group matrix stands in for the node matrix
        summary["grouped"] = True
        views = {"matrix": "null", "groups": matrices.group_matrix_text(sweep)}
    return HttpResponse(documents.json_object(summary, views), content_type="application/json")


def latest_sweep():
    return Sweep.objects.order_by("-created").first()


def grouped(sweep: Sweep) -> bool:
    """Whether the page shows the sweep's group matrix: when it stands in for the node matrix, or there are groups."""
    return not matrices.node_matrix_shown(sweep) or matrices.has_groups(sweep)


def _last_complete(before) -> int | None:
    """The newest finished sweep created before ``before``: what the fleet looked like last time."""
    return (
        Sweep.objects.filter(status="finished", created__lt=before)
        .exclude(kind__in=(*vocabulary.DISCOVER_SWEEP_KINDS, "preflight"))
        .order_by("-created")
        .values_list("pk", flat=True)
        .first()
    )


# While results arrive, an open group matrix re-reads itself at most this often: a group cell's
# median needs all of its pairs, so frames cannot update it in place as they do a node cell.
GROUP_REFRESH_MS = 2000


@login_required
def sweep_detail(request, sweep_id: int):
    sweep = get_object_or_404(Sweep, pk=sweep_id)
    previous = (
        Sweep.objects.filter(kind=sweep.kind, created__lt=sweep.created)
        .exclude(status__in=Sweep.OPEN_STATUSES)
        .order_by("-created")
        .first()
    )
    findings = list(sweep.findings.all())
    return render(
        request,
        "cluster_health/sweep.html",
        {
            "sweep": sweep,
            "findings": findings,
            "problems": problem_rows(sweep, findings),
            "trending_down": documents.trending_down(findings),
            "groups": GroupProbe.objects.filter(sweep=sweep),
            "grouped": grouped(sweep),
            "previous": previous,
            "plan": documents.plan_json(sweep),
            "group_refresh_ms": GROUP_REFRESH_MS,
            "gpu_checks": _gpu_rows(sweep),
            # What "Probe again" would take: the pairs that failed or are suspect.
            "suspect_count": PairProbe.objects.filter(sweep=sweep, status__in=rerun.RERUN_STATUSES).count(),
        },
    )


def problem_rows(sweep: Sweep | None, findings: list[Finding]) -> list[dict]:
    """The sweep's problems (shapes.documents.problem_dicts) with their findings' rows, for a page."""
    if sweep is None:
        return []
    by_id = {f.pk: f for f in findings}
    return [{**p, "rows": [by_id[pk] for pk in p["findings"]]} for p in documents.problem_dicts(sweep, findings)]


def _gpu_rows(sweep: Sweep) -> list[dict]:
    """A gpu sweep's checks for its page: each GPU's figures as (key, value, the model's median, slow) cells."""
    if sweep.kind not in vocabulary.GPU_SWEEP_KINDS:
        return []
    checks = gpus.gpu_dicts(sweep)
    for check in checks:
        for d in check["devices"]:
            d["cells"] = [(k, d.get(k), d["fleet_median"].get(k), k in d["slow"]) for k in gpus.FIGURES]
    return checks


@login_required
def history(request):
    form = HistoryFilterForm(request.GET or None)
    qs = form.filter(Sweep.objects.select_related("requested_by").order_by("-created"))
    page = Paginator(qs, 50).get_page(request.GET.get("page"))
    query = request.GET.copy()
    query.pop("page", None)
    return render(request, "cluster_health/history.html", {"form": form, "page": page, "query": query.urlencode()})


@login_required
@permission_required("cluster_health.start_sweep", raise_exception=True)
def start_sweep(request):
    form = StartSweepForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        try:
            sweep = sweeps.request_sweep(source="page", user=request.user, **form.request())
        except sweeps.SweepRequestError as exc:
            form.add_error(None, str(exc))
        else:
            return redirect("sweep", sweep.pk)
    return render(request, "cluster_health/start_sweep.html", {"form": form})


@login_required
@permission_required("cluster_health.start_sweep", raise_exception=True)
@require_POST
def cancel_sweep(request, sweep_id: int):
    sweep = get_object_or_404(Sweep, pk=sweep_id)
    if sweeps.cancel(sweep.pk):
        messages.info(request, f"Sweep {sweep.pk} cancelled; probes still running finish but are not counted.")
    else:
        messages.error(request, f"Sweep {sweep.pk} had already ended.")
    return redirect("sweep", sweep.pk)


@login_required
@permission_required("cluster_health.start_sweep", raise_exception=True)
@require_POST
def rerun_pairs(request, sweep_id: int):
    """Probe again as a new ``pairs`` sweep (sweeps/rerun.py, audited): the sweep's failed or suspect pairs,
    a finding's (``finding=ID``) or one pair (``pair=a<->b``)."""
    sweep = get_object_or_404(Sweep, pk=sweep_id)
    finding_id, pair = request.POST.get("finding", ""), request.POST.get("pair", "")
    if finding_id:
        if not (finding_id.isascii() and finding_id.isdecimal() and len(finding_id) <= 18):
            raise BadRequest("finding: not a finding id")
        pairs = rerun.finding_pairs(get_object_or_404(Finding, pk=int(finding_id), sweep=sweep))
    elif pair:
        a, sep, b = pair.partition("<->")
        if not (sep and a and b):
            raise BadRequest("pair: expected a<->b")
        pairs = [[a, b]]
    else:
        pairs = rerun.suspect_pairs(sweep)
    try:
        again = rerun.rerun(sweep, pairs, source="page", user=request.user)
    except sweeps.SweepRequestError as exc:
        messages.error(request, f"Nothing probed again: {exc}")
        return redirect("sweep", sweep.pk)
    messages.info(request, f"Sweep #{again.pk} probes {len(pairs)} pair(s) of sweep #{sweep.pk} again.")
    return redirect("sweep", again.pk)
