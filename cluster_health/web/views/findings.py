"""A finding's page: why it was raised, the probes it rests on, the next step."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.shortcuts import get_object_or_404, render

from cluster_health.models import Finding
from cluster_health.shapes.findings import chain_lines, probe_line, support_probes


@login_required
def finding_detail(request, sweep_id: int, finding_id: int):
    """Why a finding was raised: its evidence chain, the probes that support it, the next step."""
    finding = get_object_or_404(Finding.objects.select_related("sweep"), pk=finding_id, sweep_id=sweep_id)
    support = support_probes(finding)
    # A rule that keeps no chain (a link failed, a node offline) reads as the probes it rests on.
    chain = chain_lines((finding.detail or {}).get("evidence")) or [probe_line(p) for p in support]
    return render(
        request,
        "cluster_health/finding.html",
        {
            "finding": finding,
            "sweep": finding.sweep,
            "support": support,
            "chain": chain,
            "next_step": (finding.detail or {}).get("next_step"),
        },
    )
