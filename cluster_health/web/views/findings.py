"""A finding's page: why it was raised, the probes it rests on, the next step."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.shortcuts import get_object_or_404, render

from cluster_health.models import Finding, PairProbe
from cluster_health.shapes.findings import chain_lines


@login_required
def finding_detail(request, sweep_id: int, finding_id: int):
    """Why a finding was raised: its evidence chain, the probes that support it, the next step."""
    finding = get_object_or_404(Finding.objects.select_related("sweep"), pk=finding_id, sweep_id=sweep_id)
    wanted = [tuple(name.split("<->", 1)) for name in finding.pairs if "<->" in name]
    probes = {
        (p.node_a.name, p.node_b.name): p
        for p in PairProbe.objects.filter(sweep_id=sweep_id)
        .filter(node_a__name__in={a for a, _ in wanted}, node_b__name__in={b for _, b in wanted})
        .select_related("node_a", "node_b")
    }
    support = [probes[k] for k in wanted if k in probes]
    return render(
        request,
        "cluster_health/finding.html",
        {
            "finding": finding,
            "sweep": finding.sweep,
            "support": support,
            "chain": chain_lines((finding.detail or {}).get("evidence")),
            "next_step": (finding.detail or {}).get("next_step"),
        },
    )
