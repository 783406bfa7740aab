"""GET /api/expected: what a node of this fleet should look like, for `python -m agents check`.

The majority torch, CUDA and NCCL versions, GPU count and interface name over the
registered nodes' facts; with ``?node=NAME``, that node's registration and heartbeat.
"""

from __future__ import annotations

from collections import Counter

from django.http import JsonResponse
from django.utils import timezone

from cluster_health.models import Node
from cluster_health.web.api import api_view, error


def _majority(values) -> object | None:
    counted = Counter(v for v in values if v not in (None, ""))
    return counted.most_common(1)[0][0] if counted else None


def _interface_of(address: str, facts: dict) -> str | None:
    for iface in facts.get("interfaces") or []:
        if address in (iface.get("addresses") or []):
            return iface.get("name")
    return None


def expected_set(nodes) -> dict:
    """The fleet's majority facts (pure over Node rows)."""
    facts = [(n.address, n.facts or {}) for n in nodes]
    versions = {
        key: _majority((f.get("versions") or {}).get(key) for _, f in facts)
        for key in ("torch", "cuda", "nccl", "driver")
    }
    gpu_counts = [len((f.get("gpus") or {}).get("devices") or []) for _, f in facts if f.get("gpus")]
    return {
        "versions": versions,
        "interface": _majority(_interface_of(a, f) for a, f in facts),
        "gpu_count": _majority(gpu_counts) or 0,
        "nodes": len(facts),
    }


@api_view()
def expected(request):
    out = expected_set(Node.objects.exclude(facts={}).only("address", "facts"))
    name = request.GET.get("node")
    if name is not None:
        if len(name) > 63:
            return error(400, "node: at most 63 characters")
        node = Node.objects.filter(name=name).first()
        now = timezone.now()
        out["node"] = {
            "name": name,
            "registered": node is not None,
            "online": bool(node and node.is_online(now)),
            "heartbeat_age_s": round((now - node.last_heartbeat).total_seconds(), 1)
            if node and node.last_heartbeat
            else None,
        }
    return JsonResponse(out)
