"""A pair's page: its probes over time, and one probe's halves in words."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.db.models import Q
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse

from cluster_health.core import merge
from cluster_health.models import Node, PairProbe
from cluster_health.shapes import health
from cluster_health.shapes.health import NOT_PASSING
from cluster_health.web.views.history import pair_history


def tcp_wording(evidence) -> str | None:
    """The node's TCP counters during a probe, worded so that the share cannot pass 100 %.

    Linux counts retransmissions apart from OutSegs ("segments sent, excluding those containing only
    retransmitted octets"), so the share of what went on the wire is retransmitted / (new + retransmitted).
    """
    tcp = (evidence or {}).get("tcp") if isinstance(evidence, dict) else None
    if not isinstance(tcp, dict):
        return None
    new, again = int(tcp.get("OutSegs") or 0), int(tcp.get("RetransSegs") or 0)
    total = new + again
    share = f"{100.0 * again / total:.1f} %" if total else "–"
    return (
        f"{total} segments sent: {new} new, {again} retransmissions ({share} of the segments sent); "
        f"{int(tcp.get('OutRsts') or 0)} resets sent, {int(tcp.get('InErrs') or 0)} input errors "
        "(the node's counters, all of its traffic during the probe)"
    )


def store_wording(evidence) -> str | None:
    """What one rank did with the TCPStore: listened on ADDR, connected to ADDR, or could not connect to it."""
    store = (evidence or {}).get("store") if isinstance(evidence, dict) else None
    if not isinstance(store, dict):
        return None
    address, connected = store.get("address") or "?", store.get("connected")
    if store.get("role") == "listen":
        if connected is None:
            return f"listened on {address}"
        return f"listened on {address}; the peer {'connected' if connected else 'never connected'}"
    if connected is None:
        return f"connecting to {address} (the outcome was not recorded)"
    return f"connected to {address}" if connected else f"could not connect to {address}"


def failing_since(final: list[PairProbe]) -> dict | None:
    """How long the pair has failed (or been slow): the first probe of the newest run of that result, from
    its final probes newest first; None while it passes."""
    if not final or final[0].status not in NOT_PASSING:
        return None
    run = health.result_class(final[0].status)
    first = final[0]
    count = 0
    for p in final:
        if health.result_class(p.status) != run:
            break
        first, count = p, count + 1
    return {"words": "failing" if run == "failing" else "slow", "sweep": first.sweep_id, "count": count}


def _pair_probes(a: Node, b: Node):
    return PairProbe.objects.filter(Q(node_a=a, node_b=b) | Q(node_a=b, node_b=a))


@login_required
def pair_detail(request, a: str, b: str):
    node_a, node_b = get_object_or_404(Node, name=a), get_object_or_404(Node, name=b)
    probes = list(_pair_probes(node_a, node_b).select_related("sweep", "node_a", "node_b").order_by("-id")[:200])
    probe_id = request.GET.get("probe", "")
    probe = next((p for p in probes if str(p.pk) == probe_id), None) if probe_id.isdigit() else None
    probe = probe or next((p for p in probes if p.is_final), probes[0] if probes else None)
    history = pair_history(probes)
    since = failing_since([p for p in probes if p.is_final])
    halves = []
    if probe:
        for role, node_name, half in (
            ("rank 0", probe.node_a.name, probe.half_a),
            ("rank 1", probe.node_b.name, probe.half_b),
        ):
            half = half or {}
            halves.append(
                {
                    "role": role,
                    "node": node_name,
                    "status": half.get("status"),
                    "stage": half.get("stage"),
                    "reason": half.get("reason"),
                    "hint": half.get("hint"),
                    "detail": half.get("detail"),
                    "interface": half.get("interface"),
                    # PostgreSQL's jsonb keeps keys in its own order; the page shows the ladder's.
                    "stage_times": merge.ladder_order(half.get("stage_times") or half.get("timings") or {}),
                    "stderr_tail": half.get("stderr_tail"),
                    "evidence": half.get("evidence") or {},
                    "tcp": tcp_wording(half.get("evidence")),
                    "store": store_wording(half.get("evidence")),
                }
            )
    return render(
        request,
        "cluster_health/pair.html",
        {
            "a": node_a,
            "b": node_b,
            "probes": probes[:50],
            "probe": probe,
            "halves": halves,
            **history,
            "since": since,
            "sizes": (probe.sizes if probe else None) or [],
        },
    )


@login_required
def probe_detail(request, probe_id: int):
    probe = get_object_or_404(PairProbe.objects.select_related("node_a", "node_b"), pk=probe_id)
    return redirect(f"{reverse('pair', args=[probe.node_a.name, probe.node_b.name])}?probe={probe.pk}")
