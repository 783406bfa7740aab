"""Dashboard pages. Everyone logged in sees everything; only operators start or cancel sweeps.

Views read rows and hand them to templates; the heatmaps fetch their data from
the JSON endpoints here (the compact payload of cluster_health.matrix) and then
follow the sweep over a WebSocket.
"""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.core.cache import cache
from django.http import JsonResponse
from django.shortcuts import get_object_or_404, render
from django.utils import timezone
from django.views.decorators.cache import never_cache

from cluster_health import matrix
from cluster_health.models import Finding, Node, PairProbe, Sweep


def node_names() -> dict[int, str]:
    return dict(Node.objects.values_list("id", "name"))


def sweep_pairs(sweep: Sweep, names: dict[int, str] | None = None) -> list[dict]:
    """A sweep's pair results as the sweep JSON of DESIGN.md has them (a, b, status, ...)."""
    names = names if names is not None else node_names()
    rows = PairProbe.objects.filter(sweep=sweep).order_by("id").values_list(
        "node_a_id", "node_b_id", "status", "stage", "reason", "hint", "latency_us_p50", "algbw_gbps",
        "busbw_gbps",
    )
    return [
        {"a": names.get(a, str(a)), "b": names.get(b, str(b)), "status": status, "stage": stage,
         "reason": reason, "hint": hint, "latency_us": lat, "algbw_gbps": algbw, "busbw_gbps": busbw}
        for a, b, status, stage, reason, hint, lat, algbw, busbw in rows.iterator(chunk_size=20000)
    ]


def sweep_matrix(sweep: Sweep) -> dict:
    """The matrix payload of a sweep; cached once the sweep is closed, since it no longer changes."""
    key = f"cluster_health:matrix:{sweep.pk}"
    if not sweep.is_open:
        cached = cache.get(key)
        if cached is not None:
            return cached
    names = node_names()
    pairs = sweep_pairs(sweep, names)
    nodes = sweep.nodes or {p[k] for p in pairs for k in ("a", "b")}
    payload = matrix.build_matrix(nodes, pairs)
    if not sweep.is_open:
        cache.set(key, payload, 3600)
    return payload


def sweep_summary(sweep: Sweep) -> dict:
    return {
        "sweep": sweep.pk, "kind": sweep.kind, "backend": sweep.backend, "status": sweep.status,
        "verdict": sweep.verdict, "source": sweep.source,
        "created": sweep.created.isoformat(), "finished": sweep.finished.isoformat() if sweep.finished else None,
        "duration_s": sweep.duration_s(), "progress": sweep.progress(), "error": sweep.error,
        "findings": [f.as_dict() for f in sweep.findings.all()],
    }


@login_required
@never_cache
def sweep_state(request, sweep_id: int):
    """Everything a sweep page draws, in one response: summary, progress, findings, matrix."""
    sweep = get_object_or_404(Sweep, pk=sweep_id)
    return JsonResponse({**sweep_summary(sweep), "matrix": sweep_matrix(sweep)})


def _latest_sweep():
    return Sweep.objects.order_by("-created").first()


@login_required
def overview(request):
    now = timezone.now()
    nodes = sorted(Node.objects.all(), key=lambda n: matrix.natural_key(n.name))
    rows = [{"node": n, "online": n.is_online(now)} for n in nodes]
    latest = _latest_sweep()
    findings = list(Finding.objects.filter(sweep=latest)) if latest else []
    last_closed = Sweep.objects.exclude(status__in=Sweep.OPEN_STATUSES).order_by("-created").first()
    return render(request, "cluster_health/overview.html", {
        "nodes": rows, "online_count": sum(r["online"] for r in rows), "sweep": latest,
        "findings": findings, "last_closed": last_closed,
    })


def _todo(request, *args, **kwargs):
    from django.http import HttpResponse

    return HttpResponse("coming soon", status=501)


consistency = node_detail = pair_detail = probe_detail = history = start_sweep = compare = _todo
compare_state = sweep_detail = cancel_sweep = report = _todo
