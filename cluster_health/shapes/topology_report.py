"""The topology a finished full sweep's matrix shows (core/topology_inference.py), for the command and the page.

Reads the sweep's stored matrix (the typed arrays the heatmaps draw, so a sweep whose passing rows
retention removed still has its figures) and today's declared groups.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from scipy.cluster import hierarchy

from cluster_health.core import topology_inference
from cluster_health.models import PairProbe, Sweep
from cluster_health.nodes import declared_groups
from cluster_health.shapes.matrices import sweep_arrays

KINDS = ("full",)  # the kinds whose matrix holds every pair


class NoMatrix(ValueError):
    """No sweep to read a topology from; the message says what to run."""


def topology_sweep(pk: int | None = None) -> Sweep:
    """Sweep ``pk`` if it is a finished full sweep, else the latest finished full sweep; NoMatrix with why not."""
    if pk is None:
        sweep = Sweep.objects.filter(kind__in=KINDS, status="finished").order_by("-pk").first()
        if sweep is None:
            raise NoMatrix("no finished full sweep yet: run one (manage.py sweep --kind full --wait)")
        return sweep
    sweep = Sweep.objects.filter(pk=pk).first()
    if sweep is None:
        raise NoMatrix(f"sweep {pk} does not exist")
    if sweep.kind not in KINDS:
        raise NoMatrix(f"sweep {pk} is a {sweep.kind} sweep: topology is read from a full sweep's matrix")
    if sweep.status != "finished":
        raise NoMatrix(f"sweep {pk} is {sweep.status}: topology is read from a finished sweep")
    return sweep


def infer(sweep: Sweep) -> tuple[topology_inference.Inference, dict[str, Any], dict[str, str]]:
    """The sweep's inferred groups, the report (``topology infer --json``) and the declared groups it was held to."""
    arrays = sweep_arrays(sweep)
    latency = np.frombuffer(arrays.latency, dtype=np.float32).astype(float)
    busbw = np.frombuffer(arrays.busbw, dtype=np.float32).astype(float)
    try:
        inferred = topology_inference.infer(arrays.nodes, latency, busbw)
    except topology_inference.InferenceError as exc:
        raise NoMatrix(f"sweep {sweep.pk}: {exc}") from None
    declared = declared_groups(arrays.nodes)
    report = topology_inference.report(inferred, declared, sweep.pk)
    report["uplinks"], report["uplinks_sweep"] = uplinks()
    return inferred, report, declared


def uplinks(pk: int | None = None) -> tuple[list[dict[str, Any]], int | None]:
    """Each group's uplink figure from topology sweep ``pk`` (default: the latest finished one that ran uplink
    rounds), and its id; ([], None) when there is none. core/topology_inference.uplink_figures says what each is."""
    found = Sweep.objects.filter(kind="topology", status="finished", params__has_key="uplink_rounds")
    sweep = found.filter(pk=pk).first() if pk is not None else found.order_by("-pk").first()
    if sweep is None:
        return [], None
    params = sweep.params or {}
    rounds = {int(k): str(g) for k, g in (params.get("uplink_rounds") or {}).items()}
    groups = {str(g): list(m) for g, m in (params.get("groups") or {}).items()}
    rows = PairProbe.objects.filter(sweep=sweep).values_list("round", "node_a__name", "node_b__name", "busbw_gbps")
    pairs = [{"round": r, "a": a, "b": b, "busbw_gbps": bw} for r, a, b, bw in rows]
    halves = PairProbe.objects.filter(sweep=sweep, round__in=list(rounds)).values_list(
        "node_a__name", "node_b__name", "half_a", "half_b"
    )
    windows = {(a, b): _window(ha, hb) for a, b, ha, hb in halves}
    for p in pairs:
        p["window"] = windows.get((p["a"], p["b"])) if p["round"] in rounds else None
    return topology_inference.uplink_figures(groups, rounds, pairs), sweep.pk


def _window(*halves: Any) -> tuple[float, float] | None:
    """When a pair's bandwidth stage ran (wall clock seconds, the two halves' span): it is a probe's last stage, so
    it ended when the half finished; None where a half does not say (retention pruned it, or an older agent)."""
    spans = []
    for half in halves:
        if not isinstance(half, dict):
            return None
        end, took = half.get("finished_at"), (half.get("stage_times") or {}).get("bandwidth")
        if not isinstance(end, (int, float)) or not isinstance(took, (int, float)):
            return None
        spans.append((float(end) - float(took), float(end)))
    return (min(s for s, _ in spans), max(e for _, e in spans)) if spans else None


_inferred: dict[tuple, dict[str, str]] = {}  # full sweep id -> node -> inferred group, for the last few sweeps read
_INFERRED_KEPT = 4


def inferred_groups(names: list[str]) -> dict[str, str]:
    """Node -> the group the latest finished full sweep's measurements place it in, for those of ``names`` it
    places, when that sweep's answer is ``groups`` (sure) with no group of a single node; else nothing. What stands in for labels where none
    are declared: a topology or sampled sweep plans with it and the group view sums by it (nodes.groups_of).
    Each group is named as the page names it (the label most of its members carry, else group-N)."""
    sweep = Sweep.objects.filter(kind__in=KINDS, status="finished").order_by("-pk").first()
    if sweep is None:
        return {}
    key = (sweep.pk, sweep.finished)  # a test database reuses ids
    if key not in _inferred:
        try:
            inferred, report, _ = infer(sweep)
        except NoMatrix:
            report = {"answer": topology_inference.ONE_GROUP, "groups": []}
        found = {}
        # A group of one node is what the culprit rules call a slow node (every link of it slow), not a rack:
        # such an answer stands in for no label.
        if report["answer"] == topology_inference.GROUPS and all(len(g["nodes"]) >= 2 for g in report["groups"]):
            found = {n: g["name"] for g in report["groups"] for n in g["nodes"]}
        while len(_inferred) >= _INFERRED_KEPT:
            _inferred.pop(next(iter(_inferred)))
        _inferred[key] = found
    placed = _inferred[key]
    return {n: placed[n] for n in names if n in placed}


FIGURE_MAX_NODES = 512  # past this the page lists the groups without the node matrix and tree


def figure(inferred: topology_inference.Inference, report: dict[str, Any]) -> dict[str, Any] | None:
    """The page's figure: the matrix in the tree's leaf order (each group contiguous), its group boundaries,
    and the tree (scipy's dendrogram layout: one U per merge, leaves at 5, 15, 25, ...). None past
    FIGURE_MAX_NODES."""
    placed = inferred.placed
    if len(placed) > FIGURE_MAX_NODES:
        return None
    tree = hierarchy.dendrogram(inferred.linkage, no_plot=True, labels=placed)
    order: list[str] = list(tree["ivl"])
    name_of = {n: g["name"] for g in report["groups"] for n in g["nodes"]}
    bounds: list[dict[str, Any]] = []
    for k, node in enumerate(order):
        if bounds and bounds[-1]["name"] == name_of[node]:
            bounds[-1]["end"] = k
        else:
            bounds.append({"name": name_of[node], "start": k, "end": k})
    pos = {n: i for i, n in enumerate(inferred.nodes)}
    idx = [pos[n] for n in order]

    def cells(square: Any) -> list[list[float | None]]:
        part = square[np.ix_(idx, idx)]
        return [[None if not np.isfinite(v) else round(float(v), 3) for v in row] for row in part]

    return {
        "order": order,
        "busbw": cells(inferred.busbw),
        "latency": cells(inferred.latency),
        "bounds": bounds,
        "mismatched": [m["node"] for m in report["mismatches"]],
        "tree": {"x": tree["dcoord"], "y": tree["icoord"]},
        "cut": inferred.cut,
    }
