"""A link's and a node's history at a glance: busbw and status over the last sweeps, for the pair and node pages.

Each is read in one query whatever the number of sweeps (a node's: its pairs in the last
HISTORY_SWEEPS closed pair sweeps, through a subquery), and drawn on a scale anchored as the
heatmaps' (``anchor``): from 0 to the fleet's expected busbw (shapes/scales.py), else to the
fastest figure shown, so a healthy link sits near the top of every chart and a slow one low.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Iterable

from django.db.models import Q

from agents import contract
from cluster_health.core import matrix
from cluster_health.models import Node, PairProbe, Sweep
from cluster_health.shapes import scales
from cluster_health.shapes.health import PAIR_SWEEP_KINDS

HISTORY_SWEEPS = 30  # how many sweeps a pair's or a node's chart goes back


def pair_trend(probes: Iterable[PairProbe], limit: int = HISTORY_SWEEPS) -> list[dict]:
    """A pair's final probes (given newest first, ``sweep`` loaded) as chart points, oldest first, at most ``limit``.

    Each point's ``at`` is when it finished (the page words it in TIME_ZONE)."""
    final = [p for p in probes if p.is_final][:limit]
    return [
        {
            "at": p.finished or p.sweep.created,
            "sweep": p.sweep_id,
            "status": p.status,
            "busbw_gbps": p.busbw_gbps,
            "latency_us": p.latency_us_p50,
            # A probe that did not work has no bandwidth: the trend marks it apart rather than leave it out.
            "failed": p.status in matrix.BAD_STATUSES,
            "stage": p.stage,
            "reason": p.reason,
        }
        for p in reversed(final)
    ]


def node_trend(node: Node, limit: int = HISTORY_SWEEPS) -> tuple[list[dict], list[int]]:
    """The node's links in each of the last ``limit`` closed pair sweeps, oldest first, and the baselines they used.

    One point per sweep that kept a row of the node: how many links, how many had each status (most
    severe first), the median busbw of those that measured one, the slowest (with its peer) and the
    fastest. Statuses are the links' own: a link to a peer that was offline counts as offline, which
    the chart says as "1 of 5 links offline", never as the node being offline. One query.
    """
    recent = (
        Sweep.objects.exclude(status__in=Sweep.OPEN_STATUSES)
        .filter(kind__in=PAIR_SWEEP_KINDS)
        .order_by("-created", "-pk")
        .values("pk")[:limit]
    )
    rows = (
        PairProbe.objects.filter(Q(node_a=node) | Q(node_b=node), sweep_id__in=recent)
        .values_list(
            "sweep_id",
            "sweep__finished",
            "sweep__created",
            "sweep__baseline_id",
            "node_a_id",
            "node_a__name",
            "node_b__name",
            "status",
            "busbw_gbps",
        )
        .order_by()
    )
    links: dict[int, list[tuple[str, str, float | None]]] = defaultdict(list)
    when, baselines = {}, {}
    for sweep_id, finished, created, baseline_id, a_id, a, b, status, gbps in rows:
        links[sweep_id].append((b if a_id == node.pk else a, status, gbps))
        when[sweep_id] = finished or created
        baselines[sweep_id] = baseline_id
    points = []
    for sweep_id in sorted(links, key=lambda s: (when[s], s)):
        counts: dict[str, int] = defaultdict(int)
        for _, status, _ in links[sweep_id]:
            counts[status] += 1
        measured = sorted((gbps, peer) for peer, _, gbps in links[sweep_id] if gbps is not None)
        points.append(
            {
                "at": when[sweep_id],
                "sweep": sweep_id,
                "links": len(links[sweep_id]),
                "counts": dict(sorted(counts.items(), key=lambda c: (-contract.STATUS_SEVERITY.get(c[0], -1), c[0]))),
                "median_gbps": statistics.median(g for g, _ in measured) if measured else None,
                "low_gbps": measured[0][0] if measured else None,
                "low_peer": measured[0][1] if measured else None,
                "high_gbps": measured[-1][0] if measured else None,
            }
        )
    newest_first = [baselines[p["sweep"]] for p in reversed(points)]
    return points, [b for b in newest_first if b is not None]


def anchor(baseline_ids: Iterable[int | None], figures: Iterable[float | None]) -> dict:
    """Where a history chart's busbw axis ends: the fleet's expected busbw under the newest of the baselines
    (shapes/scales.py, cached per baseline), else the fastest of the figures; ``gbps`` None when there is neither.

    ``{"gbps", "expected"}``: ``expected`` says whether it is the fleet's expected figure (drawn as a line).
    """
    for baseline_id in baseline_ids:
        if baseline_id is not None:
            expected = scales.expected_busbw(Sweep(baseline_id=baseline_id))
            if expected:
                return {"gbps": expected, "expected": True}
    return {"gbps": max((f for f in figures if f), default=None), "expected": False}
