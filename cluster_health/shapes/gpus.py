"""A gpu sweep's checks as the sweep JSON, the API and the sweep page show them: one entry per node,
one per GPU inside it, each figure beside the median of the same GPU model across the sweep.

The outliers marked here are the ones ``agents.gpu_findings.check_findings`` names (the same
rule, ``slow_outliers``), so the page marks exactly the GPUs the findings speak of.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from agents import gpu_findings
from cluster_health.models import GpuCheck, Sweep

DEVICE_FIELDS = (
    "index",
    "name",
    "status",
    "reason",
    "hint",
    "bf16_tflops",
    "fp16_tflops",
    "h2d_gbps",
    "d2h_gbps",
    "pcie_gbps",
    "memory_touched_gib",
)
FIGURES = tuple(key for key, _, _ in gpu_findings.METRICS)


def gpu_dicts(sweep: Sweep) -> list[dict[str, Any]]:
    """``[{"node", "status", "stage", "reason", "hint", "devices": [...]}]`` in the sweep's node order.

    Each device carries ``fleet_median`` (figure -> the median of its model in this sweep, when
    at least ``gpu_findings.MIN_PEERS`` GPUs of the model were measured) and ``slow`` (the figures
    where it is an outlier below that median).
    """
    rows = GpuCheck.objects.filter(sweep=sweep).values_list("node__name", "status", "stage", "reason", "hint", "result")
    checks = []
    for node, status, stage, reason, hint, result in rows:
        devices = [{k: d.get(k) for k in DEVICE_FIELDS} for d in (result or {}).get("devices") or []]
        checks.append(
            {"node": node, "status": status, "stage": stage, "reason": reason, "hint": hint, "devices": devices}
        )
    _mark_outliers(checks)
    order = {n: i for i, n in enumerate(sweep.nodes)}
    return sorted(checks, key=lambda c: order.get(c["node"], len(order)))


def _mark_outliers(checks: list[dict[str, Any]]) -> None:
    samples: dict[tuple[str, str], list[tuple[dict[str, Any], float]]] = defaultdict(list)
    for check in checks:
        for dev in check["devices"]:
            dev["fleet_median"], dev["slow"] = {}, []
            for key in FIGURES:
                if isinstance(dev.get(key), (int, float)):
                    samples[(dev.get("name") or "?", key)].append((dev, float(dev[key])))
    for (_, key), found in samples.items():
        mid, slow = gpu_findings.slow_outliers(found)
        if mid is None:
            continue
        for dev, _ in found:
            dev["fleet_median"][key] = round(mid, 3)
        for dev, _ in slow:
            dev["slow"].append(key)


MATRIX_FIGURES = ("p2p_gbps", "p2p_off_gbps", "nccl_busbw_gbps")


def pair_matrix(result: dict[str, Any] | None) -> dict[str, Any]:
    """A node's GPU x GPU matrix as the node page's heatmap draws it: row = source GPU, column = destination,
    one grid per figure (the diagonal and pairs not measured null), the link between each two GPUs."""
    pairs = (result or {}).get("pairs") or []
    indexes = sorted(
        {d["index"] for d in (result or {}).get("devices") or []} | {p[k] for p in pairs for k in ("src", "dst")}
    )
    at = {g: i for i, g in enumerate(indexes)}
    out: dict[str, Any] = {"gpus": indexes}
    for key in (*MATRIX_FIGURES, "link", "nvlink_lanes"):
        grid: list[list[Any]] = [[None] * len(indexes) for _ in indexes]
        for p in pairs:
            grid[at[p["src"]]][at[p["dst"]]] = p.get(key)
        out[key] = grid
    return out


def node_gpus(node) -> dict[str, Any]:
    """What the node page and ``GET /api/nodes/NAME/gpus`` show of a node's GPUs: its NVML facts, and its
    latest closed gpu check with every GPU's figures and the GPU x GPU matrix."""
    check = (
        GpuCheck.objects.filter(node=node, finished__isnull=False)
        .select_related("sweep")
        .order_by("-finished", "-pk")
        .first()
    )
    facts = gpu_findings.gpu_facts(node.facts)
    out: dict[str, Any] = {
        "node": node.name,
        "driver": facts.get("driver"),
        "cuda_driver": facts.get("cuda_driver"),
        "error": facts.get("error"),
        "devices": facts.get("devices") or [],
        "check": None,
    }
    if check is not None:
        result = check.result or {}
        out["check"] = {
            "sweep": check.sweep_id,
            "status": check.status,
            "stage": check.stage,
            "reason": check.reason,
            "hint": check.hint,
            "finished": check.finished.isoformat() if check.finished else None,
            "devices": [{k: d.get(k) for k in DEVICE_FIELDS} for d in result.get("devices") or []],
            "matrix": pair_matrix(result),
        }
    return out
