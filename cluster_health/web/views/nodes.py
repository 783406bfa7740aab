"""The Nodes page (health and versions), a node's page, and retiring or activating a node."""

from __future__ import annotations

import json

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required, permission_required
from django.core.cache import cache
from django.core.exceptions import BadRequest
from django.db.models import Q
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_POST

from cluster_health import nodes
from cluster_health.actions.models import SlurmDrain
from cluster_health.core import consistency, culprits, matrix
from cluster_health.models import Node, PairProbe, Sweep
from cluster_health.shapes import gpus, health, offenders
from cluster_health.web.heavy import heavy
from cluster_health.web.views.history import node_history
from cluster_health.web.views.home import NODE_COLUMNS, node_state

CONSISTENCY_CACHE_KEY = "cluster-health:consistency-table"


def fleet_consistency() -> dict:
    """The node consistency table over every node's facts: built at most once per CONSISTENCY_CACHE_S
    for all viewers (a 4,096-node fleet's facts are megabytes), however many pages ask for it."""
    keep_s = settings.CONSISTENCY_CACHE_S
    table = cache.get(CONSISTENCY_CACHE_KEY) if keep_s else None
    if table is None:
        facts = dict(Node.objects.values_list("name", "facts"))
        table = consistency.table({name: f or {} for name, f in facts.items()})
        if keep_s:
            cache.set(CONSISTENCY_CACHE_KEY, table, keep_s)
    return table


@login_required
@heavy
def consistency_view(request):
    """The Nodes page's Versions tab: the node consistency table."""
    now = timezone.now()
    table = fleet_consistency()
    online = {n.name: n.is_online(now) for n in Node.objects.only("name", "last_heartbeat")}
    return render(request, "cluster_health/consistency.html", {"table": table, "online": online, "tab": "versions"})


def _health_row(n: Node, h: health.NodeHealth, group: tuple[str, str] | None, now, repeat: dict) -> dict:
    online = n.is_online(now)
    return {
        # A repeat offender itself, and its links that are (shapes/offenders.py: as of now, over the last days).
        "repeat": repeat.get(n.name),
        "repeat_links": [f for s, f in repeat.items() if "<->" in s and n.name in s.split("<->")],
        "node": n,
        "online": online,
        "state": node_state(n, online, n.silent_for(now), now),
        "group": group,
        "health": h,
        "more_peers": max(0, len(h.failing_peers) - NODE_PEERS_LISTED),
    }


NODE_PEERS_LISTED = 6  # failing peers named in a Nodes page row; the rest are counted
# Rows the Nodes page lists before "show all" (problems come first, so none is cut off before a healthy
# node): 1,024 rows are 1.2 MB of HTML and 360 ms to answer; a 4,096-node fleet would be four times that.
NODES_PAGE_ROWS = 1000


@login_required
def nodes_view(request):
    """The Nodes page: each node's online state, last sweep result, failing peers, findings naming it,
    since which sweep it fails, its topology group; Retire for operators. Problems first."""
    now = timezone.now()
    every = list(Node.objects.only(*NODE_COLUMNS, "topology_group"))
    found = health.fleet_health([n for n in every if n.active])
    names = [n.name for n in every]
    groups = culprits.node_groups(names, settings.GROUP_PATTERN, nodes.declared_groups(names))
    rank = {"failing": 0, "degraded": 1, "untested": 2, "ok": 3}
    repeat = offenders.current(now)
    rows = sorted(
        (_health_row(n, found[n.name], groups.get(n.name), now, repeat) for n in every if n.active),
        key=lambda r: (r["online"], rank[r["health"].state], r["repeat"] is None, matrix.natural_key(r["node"].name)),
    )
    retired = sorted((n for n in every if not n.active), key=lambda n: matrix.natural_key(n.name))
    listed = rows if request.GET.get("all") == "1" else rows[:NODES_PAGE_ROWS]
    return render(
        request,
        "cluster_health/nodes.html",
        {
            "rows": listed,
            "unlisted": len(rows) - len(listed),
            "active_total": len(rows),
            "retired": retired,
            "online_count": sum(r["online"] for r in rows),
            "peers_listed": NODE_PEERS_LISTED,
            "repeat_total": sum(1 for s in repeat if "<->" not in s),
            "repeat_days": settings.REPEAT_OFFENDER_DAYS,
            "tab": "health",
        },
    )


@login_required
@permission_required("cluster_health.start_sweep", raise_exception=True)
@require_POST
def node_activity(request, name: str):
    """Retire a node (sweeps leave it out) or activate it again: the operation of ``manage.py nodes``."""
    action = request.POST.get("action")
    if action not in ("retire", "activate"):
        raise BadRequest("action: retire or activate")
    get_object_or_404(Node, name=name)
    nodes.set_active([name], action == "activate")
    if action == "retire":
        messages.info(request, f"{name} retired: sweeps without a node list leave it out until it is activated.")
    else:
        messages.info(request, f"{name} activated: sweeps cover it again, and fail while it is offline.")
    target = request.POST.get("next")
    return redirect(
        target if target in (reverse("nodes"), reverse("node", args=[name])) else reverse("node", args=[name])
    )


# Facts' dotted keys as a person reads them; keys not listed keep their dotted form.
FACT_LABELS = {
    "versions.torch": "torch",
    "versions.cuda": "CUDA (torch built with)",
    "versions.nccl": "NCCL",
    "versions.cuda_available": "CUDA available",
    "versions.gpu_count": "GPUs",
    "versions.python": "Python",
    "versions.driver": "NVIDIA driver",
    "versions.cuda_driver": "CUDA driver",
    "gpus.devices": "GPU devices",
    "gpus.error": "GPU query error",
    "gpus.driver": "NVIDIA driver (NVML)",
    "gpus.cuda_driver": "CUDA driver (NVML)",
    "host.hostname": "hostname",
    "host.fqdn": "FQDN",
    "host.resolves_to": "hostname resolves to",
    "host.loopback": "hostname resolves to loopback",
    "host.warning": "hostname warning",
    "system.cpus": "CPUs",
    "system.mem_total_mib": "memory, total (MiB)",
    "system.mem_available_mib": "memory, available (MiB)",
    "system.load": "load average (1, 5, 15 min)",
    "system.kernel": "kernel",
    "system.machine": "machine",
}


def _fact_label(key: str) -> str:
    if key in FACT_LABELS:
        return FACT_LABELS[key]
    if key.startswith("env."):
        return key.removeprefix("env.")  # a launch variable is read by its own name
    return key.replace("_", " ").replace(".", " · ")


def _flatten(facts, prefix=""):
    """Facts as (dotted key, value) rows; lists of objects stay JSON, everything else is shown as is."""
    for key, val in facts.items():
        name = f"{prefix}{key}"
        if isinstance(val, dict) and val:
            yield from _flatten(val, name + ".")
        elif isinstance(val, list) and val and isinstance(val[0], dict):
            yield name, json.dumps(val, indent=1)
        else:
            yield name, ", ".join(map(str, val)) if isinstance(val, list) else val


@login_required
def node_detail(request, name: str):
    node = get_object_or_404(Node, name=name)
    table = fleet_consistency()
    row = next((r for r in table["rows"] if r["node"] == name), None)
    found = health.fleet_health([node])[name]
    last = Sweep.objects.filter(pk=found.sweep_id).first() if found.sweep_id else None
    peers = health.peer_bandwidth(node, last)
    failures = (
        PairProbe.objects.filter(Q(node_a=node) | Q(node_b=node), status__in=health.NOT_PASSING)
        .select_related("node_a", "node_b", "sweep")
        .order_by("-id")[:30]
    )
    interfaces = (node.facts or {}).get("interfaces") or []
    # Interfaces and GPUs have tables of their own.
    facts = [(_fact_label(k), k, v) for k, v in _flatten(node.facts or {}) if not k.startswith(("interfaces", "gpus"))]
    return render(
        request,
        "cluster_health/node.html",
        {
            "node": node,
            "online": node.is_online(),
            "clock_off": node.clock_offset_s is not None and abs(node.clock_offset_s) > settings.CLOCK_SKEW_TOLERANCE_S,
            "row": row,
            "table": table,
            "health": found,
            # A repeat offender as of now, if it is one (shapes/offenders.py: detail.blamed of .window days).
            "repeat_offender": offenders.current().get(name),
            "last_sweep": last,
            "peers": peers,
            # The bars' full width: the sweep's fastest pair, so a node slow with every peer shows short bars.
            "peer_scale": health.fastest(last, peers),
            "failures": failures,
            # Its links over the last sweeps (one query), on the heatmaps' anchored scale.
            **node_history(node),
            "facts": facts,
            "facts_as_of": node.last_heartbeat,
            "interfaces": interfaces,
            "gpus": gpus.node_gpus(node),
            # Slurm: whether cluster-health drained it and why (the rows its Slurm actions keep), and the mode.
            "slurm_drain": SlurmDrain.objects.filter(node=name).order_by("-drained").first(),
            "slurm_actions": settings.SLURM_ACTIONS,
        },
    )
