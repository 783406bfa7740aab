"""A finished sweep's findings: culprits, degraded links, groups, interfaces, consistency, launch settings.

Reads the sweep's rows and hands them to the pure rules in ``cluster_health.core``.
"""

from __future__ import annotations

from statistics import median

from django.conf import settings
from django.utils import timezone

from agents import contract
from cluster_health import jsontext, vocabulary
from cluster_health.core import (
    advertised,
    clocks,
    confirmation,
    consistency,
    culprits,
    discovery,
    fleet,
    history,
    judging,
    rehearsal,
    topology_inference,
    verdicts,
)
from cluster_health.models import GroupProbe, Node, PairProbe, Sweep
from cluster_health.nodes import judging_groups
from cluster_health.queues import backlog
from cluster_health.shapes import offenders
from cluster_health.sweeps import gpus

READ_CHUNK = 10000  # pair rows read per round trip
HALVES_CHUNK = 2000  # pair rows with both halves (larger) read per round trip


def sweep_findings(sweep: Sweep) -> tuple[list[dict], list[str]]:
    """The findings of a sweep whose probes are all closed, and every status that counts toward its verdict."""
    if sweep.kind in vocabulary.GPU_SWEEP_KINDS:
        return _gpu_sweep_findings(sweep)
    now = timezone.now()
    pairs = [
        {
            "a": a,
            "b": b,
            "status": s,
            "stage": st,
            "reason": r,
            "hint": h,
            "busbw_gbps": bw,
            "latency_us": lat,
            "sizes": jsontext.value_of(sz),
            "evidence": jsontext.value_of(ev),
        }
        for a, b, s, st, r, h, bw, lat, sz, ev in PairProbe.objects.filter(sweep=sweep)
        .annotate(sizes_text=jsontext.column("sizes"), evidence_text=jsontext.column("evidence"))
        .values_list(
            "node_a__name",
            "node_b__name",
            "status",
            "stage",
            "reason",
            "hint",
            "busbw_gbps",
            "latency_us_p50",
            "sizes_text",
            "evidence_text",
        )
        .iterator(chunk_size=READ_CHUNK)
    ]
    # A passed pair of an uplink round moved a share of its group's uplink (closing.uplink_share): no link's figure.
    pairs = [p for p in pairs if not (p["status"] == "ok" and "uplink" in (p["evidence"] or {}))]
    nodes = list(Node.objects.filter(name__in=sweep.nodes))
    facts = {n.name: n.facts for n in nodes}
    addresses = {n.name: n.address for n in nodes}
    offline = {n.name for n in nodes if not n.is_online(now)} - backlog.unheard_is_not_silent(sweep.nodes)
    groups = list(GroupProbe.objects.filter(sweep=sweep))
    declared = judging_groups(sweep)
    found = confirmation.confirmed_slow(
        _matrix_findings(sweep.nodes, pairs, offline, absent_at_start(sweep), declared), pairs
    )
    found = advertised.name_unroutable(found, pairs, addresses, facts)  # in place of what it explains
    blamed = {f["subject"] for f in found if f["code"] == "node_offline"}
    found += verdicts.degraded_findings(pairs) + judging.sweep_slow(pairs)
    if sweep.kind not in (*vocabulary.DISCOVER_SWEEP_KINDS, "preflight"):
        found += _history_findings(sweep, pairs, found)
    for g in groups:
        if g.kind == "preflight":
            found += rehearsal.rank_findings(g.nodes, g.halves, g.status, g.reason, g.hint)
        else:
            found += verdicts.group_findings(
                {"status": g.status, "stage": g.stage, "reason": g.reason, "hint": g.hint, "nodes": g.nodes}, blamed
            )
    if sweep.kind in vocabulary.DISCOVER_SWEEP_KINDS:
        found += _interface_findings(sweep, pairs, addresses)
    if sweep.kind in ("full", "preflight", "group"):
        found += consistency.findings(facts, addresses)
    if sweep.kind in ("full", "preflight"):
        found += gpus.fleet_findings(facts)
    if sweep.kind == "full":  # a whole matrix: the groups it shows, held against the declared ones
        found += topology_inference.declared_mismatch_findings(sweep.nodes, pairs, declared)
    if sweep.kind == "preflight":
        found += rehearsal.setting_findings(sweep.params, facts)
    found += clocks.clock_findings(
        {n.name: n.clock_offset_s for n in nodes}, settings.CLOCK_SKEW_TOLERANCE_S, settings.SIGNATURE_WINDOW_S
    )
    return found, [p["status"] for p in pairs] + [g.status for g in groups]


def _gpu_sweep_findings(sweep: Sweep) -> tuple[list[dict], list[str]]:
    """A gpu sweep's findings: every node's check, then the fleet's GPU facts, then clocks."""
    found, statuses = gpus.check_findings(sweep)
    nodes = list(Node.objects.filter(name__in=sweep.nodes))
    found += gpus.fleet_findings({n.name: n.facts for n in nodes})
    found += clocks.clock_findings(
        {n.name: n.clock_offset_s for n in nodes}, settings.CLOCK_SKEW_TOLERANCE_S, settings.SIGNATURE_WINDOW_S
    )
    return found, statuses


def absent_at_start(sweep: Sweep) -> dict[str, str]:
    """The sweep's nodes that were offline when it was planned, each with its silence at that moment."""
    planned = sweep.started or sweep.created
    return {
        name: fleet.describe_silence(fleet.parse_time(beat), planned)
        for name, beat in (sweep.params.get("offline_at_start") or {}).items()
    }


def _matrix_findings(
    nodes: list[str], pairs: list[dict], offline: set[str], absent: dict[str, str], declared: dict[str, str]
) -> list[dict]:
    """Per-node and per-link culprits, with the matrix-wide inference (culprits.infer) taking the pairs it explains.

    declared: node name -> its declared topology group; the others are grouped by CLUSTER_HEALTH_GROUP_PATTERN.
    """
    inferred = culprits.infer(nodes, pairs, settings.GROUP_PATTERN, declared, offline | set(absent))
    explained = culprits.explained_pairs(inferred)
    blamed = {f["subject"] for f in inferred if f["code"] == "inbound_blocked"}
    kept = []
    per_node = verdicts.culprit_findings(nodes, pairs, offline, absent)
    named = {f["subject"] for f in per_node if f["code"] in ("node_offline", "node_unreachable")}
    inferred = [f for f in inferred if not (f["code"] == "node_common_factor" and f["subject"] in named)]
    for f in per_node:
        if f["code"] == "link_failed" and f["subject"] in explained:
            continue  # named by a node, group or direction finding that lists it
        if f["code"] == "node_unreachable" and f["subject"] in blamed:
            continue  # the direction-aware finding says more about the same node
        kept.append(f)
    return kept + inferred


def _largest(sizes: list[dict] | None) -> int | None:
    """The largest message size a probe's size rows record, if any."""
    rows = [r["bytes"] for r in sizes or [] if isinstance(r, dict) and isinstance(r.get("bytes"), int)]
    return max(rows) if rows else None


def _history_findings(sweep: Sweep, pairs: list[dict], current: list[dict]) -> list[dict]:
    """Flapping and drifting links, and repeat offenders: this sweep's pairs and ``current`` findings with the sweeps
    before it."""
    earlier = list(
        Sweep.objects.filter(status="finished", pk__lt=sweep.pk)
        .exclude(kind__in=(*vocabulary.DISCOVER_SWEEP_KINDS, "preflight"))
        .order_by("-pk")
        .values_list("pk", flat=True)[: history.HISTORY_SWEEPS - 1]
    )
    if not earlier:
        return []
    transient: dict[int, list[tuple[str, str]]] = {pk: [] for pk in earlier}
    for sid, a, b in PairProbe.objects.filter(sweep_id__in=earlier, status="transient").values_list(
        "sweep_id", "node_a__name", "node_b__name"
    ):
        transient[sid].append((a, b))
    found: list[dict] = history.transient_nodes(
        [transient[pk] for pk in sorted(earlier)] + [[(p["a"], p["b"]) for p in pairs if p["status"] == "transient"]]
    )
    links = {(p["a"], p["b"]): p for p in pairs}
    past: dict[tuple[str, str], list[tuple[int, str, float | None, int | None]]] = {}
    rows = (
        PairProbe.objects.filter(sweep_id__in=earlier)
        .exclude(status__in=vocabulary.OPEN_STATUSES)
        .exclude(evidence__has_key="uplink")  # a share of an uplink, not the link's figure (closing.uplink_share)
        .annotate(sizes_text=jsontext.column("sizes"))
        .values_list("sweep_id", "node_a__name", "node_b__name", "status", "busbw_gbps", "sizes_text", "load")
    )
    # Each sweep's links that passed, by size: a link's busbw next to its peers of the same moment.
    peers: dict[tuple[int, int | None], list[float]] = {}
    for sid, a, b, status, bw, sizes_text, load in rows.iterator(chunk_size=READ_CHUNK):
        sizes = jsontext.value_of(sizes_text)
        key = (a, b) if (a, b) in links else (b, a)
        if key in links:
            # A figure measured with a side's CPU saturated is its share of the CPU: no point of a trend.
            trend_bw = None if judging.saturated_figure(load) else bw
            past.setdefault(key, []).append((sid, status, trend_bw, _largest(sizes)))
        if status in contract.PASSED_STATUSES and bw:
            peers.setdefault((sid, _largest(sizes)), []).append(bw)
    for p in pairs:
        if p["status"] in contract.PASSED_STATUSES and p.get("busbw_gbps"):
            peers.setdefault((sweep.pk, _largest(p.get("sizes"))), []).append(p["busbw_gbps"])
    middle = {k: median(v) for k, v in peers.items() if len(v) > judging.MIN_PEERS}
    # A sweep whose links completed different largest sizes (a busy moment cuts the bandwidth ladder
    # short): its median over every size it reached stands in for its peers at this link's size.
    everyone: dict[int, list[float]] = {}
    for (sid, _), v in peers.items():
        everyone.setdefault(sid, []).extend(v)
    for sid, size in list(peers):
        if (sid, size) not in middle and len(everyone[sid]) > judging.MIN_PEERS:
            middle[(sid, size)] = median(everyone[sid])
    for key, now in links.items():
        series = sorted(past.get(key, []))
        statuses = [st for _, st, _, _ in series if st != "skipped"] + [now["status"]]
        size = _largest(now.get("sizes"))
        # Only busbw measured at the same message size is comparable across sweeps.
        points = [(sid, bw) for sid, st, bw, sz in series if st in contract.PASSED_STATUSES and bw and sz == size]
        if (
            now["status"] in contract.PASSED_STATUSES
            and now.get("busbw_gbps")
            and not judging.saturated_figure(judging.pair_score(now))
        ):
            points.append((sweep.pk, now["busbw_gbps"]))
        busbw = [bw for _, bw in points]
        relative = None
        if all((sid, size) in middle for sid, _ in points):
            relative = [bw / middle[(sid, size)] for sid, bw in points]
        found += history.link_findings(f"{key[0]}<->{key[1]}", statuses, busbw, relative)
    return _repeat_offenders(sweep, pairs, current) + found[: verdicts.MAX_LINK_FINDINGS]


def _repeat_offenders(sweep: Sweep, pairs: list[dict], current: list[dict]) -> list[dict]:
    """Nodes and links blamed on confirmed evidence on REPEAT_OFFENDER_K of the last REPEAT_OFFENDER_DAYS days, this
    sweep's day the last (shapes/offenders.py reads the earlier sweeps' blames)."""
    today = timezone.localdate(sweep.finished or timezone.now())
    per_sweep = offenders.blamed_by_sweep(offenders.window_start(today), before=sweep.pk)
    now = {
        (p["a"], p["b"]) if p["a"] <= p["b"] else (p["b"], p["a"])
        for p in pairs
        if confirmation.outcome(p) == "confirmed"
    }
    mine = [(f["subject"], f.get("pairs")) for f in current if f["severity"] == "fail"]
    local = sweep.kind in vocabulary.GPU_SWEEP_KINDS
    per_sweep.append((sweep.pk, today, history.blamed_subjects(mine, set(sweep.nodes), now, local)))
    return history.repeat_offenders(per_sweep, settings.REPEAT_OFFENDER_K, settings.REPEAT_OFFENDER_DAYS, today)


def _interface_findings(sweep: Sweep, pairs: list[dict], addresses: dict[str, str]) -> list[dict]:
    peers: dict[str, set[str]] = {n: set() for n in sweep.nodes}
    for p in pairs:
        peers[p["a"]].add(p["b"])
        peers[p["b"]].add(p["a"])
    rows = [
        discovery.combination_rows(a, b)
        for a, b in PairProbe.objects.filter(sweep=sweep)
        .values_list("half_a", "half_b")
        .iterator(chunk_size=HALVES_CHUNK)
    ]
    return discovery.interface_findings(rows, peers, addresses)
