"""The overview: the fleet's nodes (polled) beside the newest sweep's live heatmaps."""

from __future__ import annotations

from django.conf import settings
from django.contrib.auth.decorators import login_required
from django.http import JsonResponse
from django.shortcuts import render
from django.utils import timezone
from django.views.decorators.cache import never_cache

from cluster_health.core import fleet, matrix
from cluster_health.models import Finding, Node, Sweep
from cluster_health.web import times
from cluster_health.web.views.sweeps import GROUP_REFRESH_MS, grouped, latest_sweep, problem_rows

NODE_POLL_MS = 5000  # how often the overview re-reads its node table

# The table's columns only: facts are kilobytes per node and the table shows none of them.
NODE_COLUMNS = ("name", "address", "last_heartbeat", "busy", "agent_version", "active", "retired_at", "created")


def node_state(n: Node, online: bool, silent, now) -> str:
    if not n.active:
        return "retired"
    if online:
        return "online, probing" if n.busy else "online"
    if n.is_stale(now):
        return f"offline: silent for {n.silent_days(now)} days — retire it if it is gone"
    return "offline: never heard from" if silent is None else f"offline: silent for {fleet.ago(silent)}"


def _node_row(n: Node, now) -> dict:
    online = n.is_online(now)
    silent = n.silent_for(now)
    return {
        "state": node_state(n, online, silent, now),
        "heard": "never" if silent is None else f"{fleet.ago(silent)} ago",
        "name": n.name,
        "address": n.address,
        "online": online,
        "busy": n.busy,
        "active": n.active,
        "last_heartbeat": n.last_heartbeat.isoformat() if n.last_heartbeat else None,
        "agent_version": n.agent_version,
        "stale": n.is_stale(now),
        "silent_days": None if online else n.silent_days(now),
        "retired_at": n.retired_at.isoformat() if n.retired_at else None,
        # The pages' one format (cluster_health.web.times), so a script never formats a time itself.
        "last_heartbeat_text": times.absolute(n.last_heartbeat) if n.last_heartbeat else None,
        "retired_at_text": times.absolute(n.retired_at) if n.retired_at else None,
    }


# Nodes the overview lists (offline first, they fail sweeps), and retired ones apart; the rest are
# counted, not listed: 4,096 rows took 2.5 s of a 3.7 s overview to draw, and are re-read every 5 s.
OVERVIEW_NODE_ROWS = 200


def node_table(now) -> dict:
    """The overview's node table: the fleet (offline nodes first, they fail sweeps) and, apart, the retired.

    At most OVERVIEW_NODE_ROWS of each are listed; ``total`` and ``retired_total`` count them all.
    Which nodes are listed is worked out from three columns of every node; only the listed rows
    are read whole and drawn (the page polls this every NODE_POLL_MS).
    """
    cutoff = Node.online_cutoff(now)
    serving: list[tuple[bool, tuple, int]] = []  # (online, natural order, pk): offline sorts first
    retired: list[tuple[bool, tuple, int]] = []
    for pk, name, active, heard in Node.objects.values_list("pk", "name", "active", "last_heartbeat"):
        (serving if active else retired).append((heard is not None and heard >= cutoff, matrix.natural_key(name), pk))
    serving.sort()
    retired.sort(key=lambda r: r[1])
    listed = [r[2] for r in serving[:OVERVIEW_NODE_ROWS]], [r[2] for r in retired[:OVERVIEW_NODE_ROWS]]
    nodes = Node.objects.only(*NODE_COLUMNS).in_bulk(listed[0] + listed[1])
    return {
        "now": now.isoformat(),
        "online": sum(r[0] for r in serving),
        "total": len(serving),
        "nodes": [_node_row(nodes[pk], now) for pk in listed[0]],
        "retired_total": len(retired),
        "retired": [_node_row(nodes[pk], now) for pk in listed[1]],
    }


@login_required
@never_cache
def nodes_state(request):
    """The overview's node table as JSON: the fleet with online state and last heartbeat, and the retired nodes.

    The page polls it: a node goes offline by falling silent, which sends no event to
    push, and a heartbeat every few seconds from every node is too chatty to broadcast.
    """
    return JsonResponse(node_table(timezone.now()))


@login_required
def overview(request):
    table = node_table(timezone.now())
    latest = latest_sweep()
    findings = list(Finding.objects.filter(sweep=latest)) if latest else []
    last_closed = Sweep.objects.exclude(status__in=Sweep.OPEN_STATUSES).order_by("-created").first()
    return render(
        request,
        "cluster_health/overview.html",
        {
            "nodes": table["nodes"],
            "retired": table["retired"],
            "online_count": table["online"],
            "node_total": table["total"],
            "retired_total": table["retired_total"],
            "sweep": latest,
            "grouped": bool(latest) and grouped(latest),
            "findings": findings,
            "problems": problem_rows(latest, findings),
            "last_closed": last_closed,
            "node_poll_ms": NODE_POLL_MS,
            "group_refresh_ms": GROUP_REFRESH_MS,
            "stale_days": settings.STALE_NODE_DAYS,
        },
    )
