"""The history charts of the pair and node pages: their points worded for the page, and the axis they are drawn on."""

from __future__ import annotations

from cluster_health.models import Node, PairProbe
from cluster_health.shapes import link_history
from cluster_health.web import times


def chart_times(points: list[dict]) -> list[dict]:
    """History points with their time (``at``) as a figure's axis takes it and as the page words it."""
    return [
        {
            **{k: v for k, v in p.items() if k != "at"},
            # In TIME_ZONE without an offset: plotly draws the wall time it is given, so the axis reads as the page.
            "t": times.plot_time(p["at"]),
            "zone": times.zone_name(p["at"]),
            "when": times.absolute(p["at"]),
        }
        for p in points
    ]


def pair_history(probes: list[PairProbe]) -> dict:
    """A pair page's trend (its probes newest first, ``sweep`` loaded: no query of its own) and its axis."""
    trend = chart_times(link_history.pair_trend(probes))
    scale = link_history.anchor(
        (p.sweep.baseline_id for p in probes), (t["busbw_gbps"] for t in trend if t["status"] == "ok")
    )
    return {"trend": trend, "trend_scale": scale, "history_sweeps": link_history.HISTORY_SWEEPS}


def node_history(node: Node) -> dict:
    """A node page's chart of its links over the last sweeps (one query) and its axis."""
    points, baselines = link_history.node_trend(node)
    scale = link_history.anchor(baselines, (p["high_gbps"] for p in points))
    return {"trend": chart_times(points), "trend_scale": scale, "history_sweeps": link_history.HISTORY_SWEEPS}
