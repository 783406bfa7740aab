"""Dashboard pages. Everyone logged in sees everything; only operators start or cancel sweeps.

Views read rows and hand them to templates; the heatmaps fetch their data from
the JSON endpoints here (the compact payload of cluster_health.core.matrix) and then
follow the sweep over a WebSocket.
"""

from __future__ import annotations

import json

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required, permission_required
from django.core.cache import cache
from django.core.exceptions import BadRequest
from django.core.paginator import Paginator
from django.db.models import Q
from django.http import HttpResponse, JsonResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_POST

from agents import contract
from cluster_health import hangs, nodes, sweeps, vocabulary
from cluster_health.core import consistency, culprits, fleet, matrix, merge
from cluster_health.models import Finding, GroupProbe, HangDiagnosis, Node, PairProbe, Sweep
from cluster_health.queues import dispatch
from cluster_health.shapes import documents, gpus, health, matrices, scales
from cluster_health.shapes.compare import diff as sweep_diff
from cluster_health.shapes.findings import chain_lines
from cluster_health.sweeps import waiting
from cluster_health.web import times
from cluster_health.web.forms import HistoryFilterForm, StartSweepForm
from cluster_health.web.heavy import heavy

CONSISTENCY_CACHE_KEY = "cluster-health:consistency-table"


def sweep_matrix(sweep: Sweep) -> dict:
    """The matrix payload of a sweep (stored once the sweep is closed, since it no longer changes)."""
    return json.loads(matrices.matrix_text(sweep))


@login_required
@never_cache
def sweep_state(request, sweep_id: int):
    """Everything a sweep page draws, in one response: summary, progress, findings, and its node matrix,
    or past CLUSTER_HEALTH_NODE_MATRIX_MAX_NODES its group matrix instead (``matrix`` is then null)."""
    sweep = get_object_or_404(Sweep, pk=sweep_id)
    summary = documents.sweep_json(sweep, with_pairs=False, with_progress=True)
    summary["node_matrix_max_nodes"] = settings.NODE_MATRIX_MAX_NODES
    # Beside an open sweep, the page keeps the last complete one readable (its matrix and findings).
    summary["last_complete"] = _last_complete(before=sweep.created) if sweep.is_open else None
    # The throughput view's colour scale runs from 0 to this, so a healthy sweep reads as healthy.
    summary["expected_busbw_gbps"] = scales.expected_busbw(sweep)
    summary["finished_text"] = times.absolute(sweep.finished) if sweep.finished else None  # "ended ..."
    if matrices.node_matrix_shown(sweep):
        summary["grouped"] = matrices.has_groups(sweep)
        views = {"matrix": matrices.matrix_text(sweep)}
    else:  # the group matrix stands in for the node matrix
        summary["grouped"] = True
        views = {"matrix": "null", "groups": matrices.group_matrix_text(sweep)}
    return HttpResponse(documents.json_object(summary, views), content_type="application/json")


def _latest_sweep():
    return Sweep.objects.order_by("-created").first()


def _grouped(sweep: Sweep) -> bool:
    """Whether the page shows the sweep's group matrix: when it stands in for the node matrix, or there are groups."""
    return not matrices.node_matrix_shown(sweep) or matrices.has_groups(sweep)


def _last_complete(before) -> int | None:
    """The newest finished sweep created before ``before``: what the fleet looked like last time."""
    return (
        Sweep.objects.filter(status="finished", created__lt=before)
        .exclude(kind__in=(*vocabulary.DISCOVER_SWEEP_KINDS, "preflight"))
        .order_by("-created")
        .values_list("pk", flat=True)
        .first()
    )


NODE_POLL_MS = 5000  # how often the overview re-reads its node table
# While results arrive, an open group matrix re-reads itself at most this often: a group cell's
# median needs all of its pairs, so frames cannot update it in place as they do a node cell.
GROUP_REFRESH_MS = 2000


# The table's columns only: facts are kilobytes per node and the table shows none of them.
_NODE_COLUMNS = ("name", "address", "last_heartbeat", "busy", "agent_version", "active", "retired_at", "created")


def _node_state(n: Node, online: bool, silent, now) -> str:
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
        "state": _node_state(n, online, silent, now),
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
    nodes = Node.objects.only(*_NODE_COLUMNS).in_bulk(listed[0] + listed[1])
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
    latest = _latest_sweep()
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
            "grouped": bool(latest) and _grouped(latest),
            "findings": findings,
            "last_closed": last_closed,
            "node_poll_ms": NODE_POLL_MS,
            "group_refresh_ms": GROUP_REFRESH_MS,
            "stale_days": settings.STALE_NODE_DAYS,
        },
    )


@login_required
def sweep_detail(request, sweep_id: int):
    sweep = get_object_or_404(Sweep, pk=sweep_id)
    previous = (
        Sweep.objects.filter(kind=sweep.kind, created__lt=sweep.created)
        .exclude(status__in=Sweep.OPEN_STATUSES)
        .order_by("-created")
        .first()
    )
    findings = list(sweep.findings.all())
    return render(
        request,
        "cluster_health/sweep.html",
        {
            "sweep": sweep,
            "findings": findings,
            "trending_down": documents.trending_down(findings),
            "groups": GroupProbe.objects.filter(sweep=sweep),
            "grouped": _grouped(sweep),
            "previous": previous,
            "plan": documents.plan_json(sweep),
            "group_refresh_ms": GROUP_REFRESH_MS,
            "gpu_checks": _gpu_rows(sweep),
        },
    )


def _gpu_rows(sweep: Sweep) -> list[dict]:
    """A gpu sweep's checks for its page: each GPU's figures as (key, value, the model's median, slow) cells."""
    if sweep.kind not in vocabulary.GPU_SWEEP_KINDS:
        return []
    checks = gpus.gpu_dicts(sweep)
    for check in checks:
        for d in check["devices"]:
            d["cells"] = [(k, d.get(k), d["fleet_median"].get(k), k in d["slow"]) for k in gpus.FIGURES]
    return checks


@login_required
def history(request):
    form = HistoryFilterForm(request.GET or None)
    qs = form.filter(Sweep.objects.select_related("requested_by").order_by("-created"))
    page = Paginator(qs, 50).get_page(request.GET.get("page"))
    query = request.GET.copy()
    query.pop("page", None)
    return render(request, "cluster_health/history.html", {"form": form, "page": page, "query": query.urlencode()})


def _get_sweep_param(request, name):
    """A sweep named by id in the query string; 400 for anything but ASCII digits ("²" passes isdigit)."""
    raw = request.GET.get(name, "")
    if not raw:
        return None
    if not (raw.isascii() and raw.isdecimal() and len(raw) <= 18):
        raise BadRequest(f"{name}: {raw[:40]!r} is not a sweep id")
    return get_object_or_404(Sweep, pk=int(raw))


def default_comparison() -> tuple[Sweep | None, Sweep | None]:
    """The Compare page's pair with nothing chosen: the latest two closed sweeps, older first."""
    latest = list(Sweep.objects.exclude(status__in=Sweep.OPEN_STATUSES).order_by("-created")[:2])
    return (latest[1], latest[0]) if len(latest) == 2 else (None, None)


@login_required
def compare(request):
    before, after = _get_sweep_param(request, "a"), _get_sweep_param(request, "b")
    if before is None and after is None:
        before, after = default_comparison()
    same = before is not None and after is not None and before.pk == after.pk  # nothing to compare, say so
    diff = sweep_diff(sweep_matrix(before), sweep_matrix(after)) if before and after and not same else None
    recent = Sweep.objects.exclude(status__in=Sweep.OPEN_STATUSES).order_by("-created")[:200]
    return render(
        request,
        "cluster_health/compare.html",
        {
            "before": before,
            "after": after,
            "same": same,
            "diff": diff,
            "recent": recent,
        },
    )


@login_required
@never_cache
@heavy
def compare_state(request):
    before, after = _get_sweep_param(request, "a"), _get_sweep_param(request, "b")
    if not (before and after):
        return JsonResponse({"error": "a and b: two sweep ids are required"}, status=400)
    return JsonResponse(sweep_diff(sweep_matrix(before), sweep_matrix(after)))


# The report's table lists every pair status, most severe first, with 0 where none had it.
REPORT_STATUS_ORDER = sorted(matrix.STATUS_CODES, key=lambda s: (-contract.STATUS_SEVERITY.get(s, -1), s != "untested"))


def go_no_go(sweep: Sweep) -> tuple[bool, str]:
    """The maintenance window's gate, by the rule of ``manage.py sweep --wait``'s exit code: go only on 0."""
    code = waiting.exit_code(sweep)
    if code == 0:
        return True, f"GO: sweep #{sweep.pk} passed (exit code 0)."
    if sweep.status != "finished":
        return False, f"NO-GO: sweep #{sweep.pk} did not finish ({sweep.status}; exit code 3)."
    return False, f"NO-GO: sweep #{sweep.pk}'s verdict is {sweep.verdict} (exit code {code}); see the findings below."


@login_required
@heavy
def report(request, sweep_id: int):
    """Pre-maintenance report: this sweep (after) against an earlier one (before), printable."""
    after = get_object_or_404(Sweep, pk=sweep_id)
    before = _get_sweep_param(request, "before") or (
        Sweep.objects.filter(status="finished", created__lt=after.created).order_by("-created").first()
    )
    after_matrix = sweep_matrix(after)  # each sweep's matrix decoded once for the diff and the counts
    before_matrix = sweep_matrix(before) if before else None
    diff = sweep_diff(before_matrix, after_matrix) if before_matrix else None
    after_counts = matrix.status_counts(after_matrix)
    before_counts = matrix.status_counts(before_matrix) if before_matrix else None
    go, gate = go_no_go(after)
    return render(
        request,
        "cluster_health/report.html",
        {
            "after": after,
            "before": before,
            "diff": diff,
            "go": go,
            "gate": gate,
            "counts": [
                (status, (before_counts or {}).get(status, 0), after_counts.get(status, 0))
                for status in REPORT_STATUS_ORDER
            ],
            "findings": after.findings.all(),
            "baseline": after.baseline,
            "now": timezone.now(),
        },
    )


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


def _health_row(n: Node, h: health.NodeHealth, group: tuple[str, str] | None, now) -> dict:
    online = n.is_online(now)
    return {
        "node": n,
        "online": online,
        "state": _node_state(n, online, n.silent_for(now), now),
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
    every = list(Node.objects.only(*_NODE_COLUMNS, "topology_group"))
    found = health.fleet_health([n for n in every if n.active])
    names = [n.name for n in every]
    groups = culprits.node_groups(names, settings.GROUP_PATTERN, nodes.declared_groups(names))
    rank = {"failing": 0, "degraded": 1, "untested": 2, "ok": 3}
    rows = sorted(
        (_health_row(n, found[n.name], groups.get(n.name), now) for n in every if n.active),
        key=lambda r: (r["online"], rank[r["health"].state], matrix.natural_key(r["node"].name)),
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
            "last_sweep": last,
            "peers": peers,
            # The bars' full width: the sweep's fastest pair, so a node slow with every peer shows short bars.
            "peer_scale": health.fastest(last, peers),
            "failures": failures,
            "facts": facts,
            "facts_as_of": node.last_heartbeat,
            "interfaces": interfaces,
            "gpus": gpus.node_gpus(node),
        },
    )


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


def _pair_probes(a: Node, b: Node):
    return PairProbe.objects.filter(Q(node_a=a, node_b=b) | Q(node_a=b, node_b=a))


@login_required
def pair_detail(request, a: str, b: str):
    node_a, node_b = get_object_or_404(Node, name=a), get_object_or_404(Node, name=b)
    probes = list(_pair_probes(node_a, node_b).select_related("sweep", "node_a", "node_b").order_by("-id")[:200])
    probe_id = request.GET.get("probe", "")
    probe = next((p for p in probes if str(p.pk) == probe_id), None) if probe_id.isdigit() else None
    probe = probe or next((p for p in probes if p.is_final), probes[0] if probes else None)
    trend = [
        {
            # In TIME_ZONE without an offset: plotly draws the wall time it is given, so the axis reads as the page.
            "t": times.plot_time(p.finished or p.sweep.created),
            "zone": times.zone_name(p.finished or p.sweep.created),
            "sweep": p.sweep_id,
            "status": p.status,
            "busbw_gbps": p.busbw_gbps,
            "latency_us": p.latency_us_p50,
            # A probe that did not work has no bandwidth: the trend marks it apart rather than leave it out.
            "failed": p.status in matrix.BAD_STATUSES,
            "stage": p.stage,
            "reason": p.reason,
        }
        for p in reversed(probes)
        if p.is_final
    ]
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
            "trend": trend,
            "sizes": (probe.sizes if probe else None) or [],
        },
    )


@login_required
def finding_detail(request, sweep_id: int, finding_id: int):
    """Why a finding was raised: its evidence chain, the probes that support it, the next step."""
    finding = get_object_or_404(Finding.objects.select_related("sweep"), pk=finding_id, sweep_id=sweep_id)
    wanted = [tuple(name.split("<->", 1)) for name in finding.pairs if "<->" in name]
    probes = {
        (p.node_a.name, p.node_b.name): p
        for p in PairProbe.objects.filter(sweep_id=sweep_id)
        .filter(node_a__name__in={a for a, _ in wanted}, node_b__name__in={b for _, b in wanted})
        .select_related("node_a", "node_b")
    }
    support = [probes[k] for k in wanted if k in probes]
    return render(
        request,
        "cluster_health/finding.html",
        {
            "finding": finding,
            "sweep": finding.sweep,
            "support": support,
            "chain": chain_lines((finding.detail or {}).get("evidence")),
            "next_step": (finding.detail or {}).get("next_step"),
        },
    )


@login_required
def probe_detail(request, probe_id: int):
    probe = get_object_or_404(PairProbe.objects.select_related("node_a", "node_b"), pk=probe_id)
    return redirect(f"{reverse('pair', args=[probe.node_a.name, probe.node_b.name])}?probe={probe.pk}")


@login_required
@permission_required("cluster_health.start_sweep", raise_exception=True)
def start_sweep(request):
    form = StartSweepForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        try:
            sweep = sweeps.request_sweep(source="page", user=request.user, **form.request())
        except sweeps.SweepRequestError as exc:
            form.add_error(None, str(exc))
        else:
            return redirect("sweep", sweep.pk)
    return render(request, "cluster_health/start_sweep.html", {"form": form})


@login_required
@permission_required("cluster_health.start_sweep", raise_exception=True)
@require_POST
def cancel_sweep(request, sweep_id: int):
    sweep = get_object_or_404(Sweep, pk=sweep_id)
    if sweeps.cancel(sweep.pk):
        messages.info(request, f"Sweep {sweep.pk} cancelled; probes still running finish but are not counted.")
    else:
        messages.error(request, f"Sweep {sweep.pk} had already ended.")
    return redirect("sweep", sweep.pk)


@login_required
def hang_list(request):
    """The Hangs page (operators: a report holds a job's stacks, launch variables and peers): diagnose a
    running job, and every diagnosis so far."""
    if not request.user.has_perm("cluster_health.start_sweep"):
        return HttpResponse("Hang diagnoses are read and asked for by operators.", status=403)
    if request.method == "POST":
        target = (request.POST.get("job") or "").strip()
        master, slurm_job = (None, target.removeprefix("slurm:")) if target.startswith("slurm:") else (target, None)
        nodes = [n.strip() for n in (request.POST.get("nodes") or "").split(",") if n.strip()] or None
        try:
            diagnosis = hangs.request(
                master=master or None,
                slurm_job=slurm_job,
                nodes=nodes,
                source="web",
                requested_by=request.user.get_username(),
            )
        except hangs.HangRequestError as exc:
            messages.error(request, str(exc))
            return redirect("hangs")
        dispatch.send_to_server(vocabulary.TASK_HANG, diagnosis_id=diagnosis.pk, timeout_s=30.0)
        return redirect("hang", diagnosis.pk)
    recent = HangDiagnosis.objects.order_by("-created")[:100]
    return render(request, "cluster_health/hangs.html", {"diagnoses": recent})


@login_required
def hang_detail(request, pk: int):
    """One diagnosis: verdict and culprits on top, then every rank (its place, and its frames on click)."""
    if not request.user.has_perm("cluster_health.start_sweep"):
        return HttpResponse("Hang diagnoses are read by operators.", status=403)
    diagnosis = get_object_or_404(HangDiagnosis, pk=pk)
    return render(request, "cluster_health/hang.html", {"d": diagnosis, "r": diagnosis.result or {}})
