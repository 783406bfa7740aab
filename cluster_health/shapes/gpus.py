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
