"""A link's and a node's history at a glance: busbw and status over the last sweeps, for the pair and node pages.

Each is read in a fixed number of queries whatever the number of sweeps, one of them over the pair
table (a pair's: the one that lists its probes; a node's: three, the last HISTORY_SWEEPS closed
pair sweeps, its pairs in them, the slowest peers' names), and drawn on a scale anchored as the
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
READ_CHUNK = 10000


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
    the chart says as "1 of 5 links offline", never as the node being offline.

    Three queries whatever ``limit`` and the fleet's size: the sweeps (at most ``limit``), the node's
    pairs in them (ids and figures only: a time or a name on each of a 1,024-node fleet's 30,000 rows
    cost 0.5 s on SQLite), and the names of the slowest peers.
    """
    sweeps = list(
        Sweep.objects.exclude(status__in=Sweep.OPEN_STATUSES)
        .filter(kind__in=PAIR_SWEEP_KINDS)
        .order_by("-created", "-pk")
        .values_list("pk", "finished", "created", "baseline_id")[:limit]
    )
    rows = (
        PairProbe.objects.filter(Q(node_a=node) | Q(node_b=node), sweep_id__in=[s[0] for s in sweeps])
        .values_list("sweep_id", "node_a_id", "node_b_id", "status", "busbw_gbps")
        .order_by()
    )
    counts: dict[int, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    figures: dict[int, list[float]] = defaultdict(list)
    slowest: dict[int, tuple[float, int]] = {}
    for sweep_id, a, b, status, gbps in rows.iterator(chunk_size=READ_CHUNK):
        counts[sweep_id][status] += 1
        if gbps is not None:
            figures[sweep_id].append(gbps)
            if sweep_id not in slowest or gbps < slowest[sweep_id][0]:
                slowest[sweep_id] = (gbps, b if a == node.pk else a)
    names = dict(Node.objects.filter(pk__in={peer for _, peer in slowest.values()}).values_list("pk", "name"))
    points, baselines = [], []
    for sweep_id, finished, created, baseline_id in reversed(sweeps):
        if sweep_id not in counts:
            continue  # it kept no row of this node (a pairs sweep of others, or a collapsed one)
        measured = sorted(figures[sweep_id])
        by_status = counts[sweep_id]
        points.append(
            {
                "at": finished or created,
                "sweep": sweep_id,
                "links": sum(by_status.values()),
                "counts": dict(
                    sorted(by_status.items(), key=lambda c: (-contract.STATUS_SEVERITY.get(c[0], -1), c[0]))
                ),
                "median_gbps": statistics.median(measured) if measured else None,
                "low_gbps": measured[0] if measured else None,
                "low_peer": names.get(slowest[sweep_id][1]) if measured else None,
                "high_gbps": measured[-1] if measured else None,
            }
        )
        baselines.append(baseline_id)
    return points, [b for b in reversed(baselines) if b is not None]


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
