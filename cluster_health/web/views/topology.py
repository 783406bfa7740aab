"""The Topology page (operators and viewers): the groups a full sweep's measurements show, per-node confidence,
the nodes whose declared group they contradict, and the matrix ordered by group with the tree beside it."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.http import HttpResponseBadRequest
from django.shortcuts import render

from cluster_health.shapes import topology_report

FIGURE_NAMES = {"latency_us": "latency", "busbw_gbps": "busbw"}


@login_required
def topology_view(request):
    """``/topology/?sweep=N`` (default: the latest finished full sweep)."""
    raw = request.GET.get("sweep") or None
    if raw is not None and not raw.isdigit():
        return HttpResponseBadRequest("sweep: a sweep id (digits)")
    context: dict = {"asked": raw}
    try:
        sweep = topology_report.topology_sweep(int(raw) if raw else None)
        inferred, report, _ = topology_report.infer(sweep)
    except topology_report.NoMatrix as exc:
        context["problem"] = str(exc)
        return render(request, "cluster_health/topology.html", context)
    mismatched = {m["node"]: m for m in report["mismatches"]}
    groups = [
        {
            **g,
            "members": [
                {"name": n, "confidence": g["confidence"][n], "mismatch": mismatched.get(n)} for n in g["nodes"]
            ],
        }
        for g in report["groups"]
    ]
    context.update(
        sweep=sweep,
        report=report,
        measured=" and ".join(FIGURE_NAMES.get(m, m) for m in report["metrics"]),
        groups=groups,
        figure=topology_report.figure(inferred, report),
        figure_max=topology_report.FIGURE_MAX_NODES,
    )
    return render(request, "cluster_health/topology.html", context)
