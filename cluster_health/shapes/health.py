"""How each node stands after the last sweeps: the Nodes page's health columns and a node page's peers.

A node's result in a sweep is the worst status of its pairs there (offline > timeout > failed >
degraded > skipped > ok); a sweep that listed the node and kept no row of it (a collapsed sweep keeps
only the pairs that did not pass) counts as ok. Only the pair sweeps count: a group or discover
sweep says nothing about a node's links. Read in a bounded number of queries whatever the fleet's size:
per (sweep, node, status) counts of the last RECENT_SWEEPS pair sweeps, the pairs of those sweeps
that did not pass, and their findings.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field

from django.db.models import Count, Q

from agents import contract
from cluster_health import vocabulary
from cluster_health.models import BaselinePair, Finding, Node, PairProbe, Sweep

RECENT_SWEEPS = 20  # how far back "failing since sweep #N" looks
PAIR_SWEEP_KINDS = tuple(k for k in vocabulary.SWEEP_KINDS if k not in ("group", "discover"))
NOT_PASSING = (*vocabulary.BAD_STATUSES, "degraded")
_SUBJECT_SPLIT = re.compile(r"<->|↔|[,;\s]+")


def worst(statuses: Iterable[str]) -> str | None:
    """The most severe of the statuses (contract.STATUS_SEVERITY); statuses still open rank below ok."""
    return max(statuses, key=lambda s: contract.STATUS_SEVERITY.get(s, -1), default=None)


def result_class(status: str | None) -> str:
    """``failing`` (a pair did not work), ``degraded`` (slow), or ``ok``."""
    if status in vocabulary.BAD_STATUSES:
        return "failing"
    return "degraded" if status == "degraded" else "ok"


def names_in(subject: str) -> set[str]:
    """The node names a finding's subject may name ("host1<->host2", "host5", "n1, n2")."""
    return {part for part in _SUBJECT_SPLIT.split(subject) if part}


@dataclass
class NodeHealth:
    """One node after its last pair sweep: its result there, who it failed with, and since when."""

    sweep_id: int | None = None
    result: str | None = None  # worst pair status in that sweep
    counts: dict[str, int] = field(default_factory=dict)
    failing_peers: list[tuple[str, str]] = field(default_factory=list)  # (peer, status), worst first
    slow_peers: list[str] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)
    since_sweep: int | None = None  # the first sweep of the current run of the same result class

    @property
    def state(self) -> str:
        return result_class(self.result) if self.result else "untested"


def recent_pair_sweeps(limit: int = RECENT_SWEEPS) -> list[Sweep]:
    """The newest closed pair sweeps, newest first."""
    return list(
        Sweep.objects.exclude(status__in=Sweep.OPEN_STATUSES)
        .filter(kind__in=PAIR_SWEEP_KINDS)
        .only("pk", "nodes", "created", "kind", "verdict", "status")
        .order_by("-created")[:limit]
    )


def fleet_health(nodes: list[Node], limit: int = RECENT_SWEEPS) -> dict[str, NodeHealth]:
    """Each node's health after the last ``limit`` closed pair sweeps, by name."""
    sweeps = recent_pair_sweeps(limit)
    by_id = {n.pk: n.name for n in nodes}
    statuses: dict[tuple[int, str], dict[str, int]] = defaultdict(lambda: defaultdict(int))
    ids = [s.pk for s in sweeps]
    for side in ("node_a_id", "node_b_id"):
        counted = (
            PairProbe.objects.filter(sweep_id__in=ids).values_list("sweep_id", side, "status").annotate(n=Count("id"))
        )
        for sweep_id, node_id, status, n in counted.order_by():
            if node_id in by_id:
                statuses[(sweep_id, by_id[node_id])][status] += n
    health = {n.name: NodeHealth() for n in nodes}
    for name, h in health.items():
        run_class = None
        for sweep in sweeps:
            counts = statuses.get((sweep.pk, name))
            if counts is None and name not in (sweep.nodes or []):
                continue
            cls = result_class(worst(counts or {"ok": 1}))
            if h.sweep_id is None:
                h.sweep_id, h.result, h.counts, run_class = (
                    sweep.pk,
                    worst(counts or {"ok": 1}),
                    dict(counts or {}),
                    cls,
                )
                h.since_sweep = sweep.pk if cls != "ok" else None
            elif cls == run_class and cls != "ok":
                h.since_sweep = sweep.pk
            else:
                break
    _add_peers_and_findings(health)
    return health


def _add_peers_and_findings(health: dict[str, NodeHealth]) -> None:
    latest = {h.sweep_id for h in health.values() if h.sweep_id is not None}
    troubled = (
        PairProbe.objects.filter(sweep_id__in=latest, status__in=NOT_PASSING)
        .values_list("sweep_id", "node_a__name", "node_b__name", "status")
        .order_by()
    )
    for sweep_id, a, b, status in troubled:
        for me, peer in ((a, b), (b, a)):
            h = health.get(me)
            if h is None or h.sweep_id != sweep_id:
                continue
            (h.slow_peers.append(peer) if status == "degraded" else h.failing_peers.append((peer, status)))
    for h in health.values():
        h.failing_peers.sort(key=lambda p: (-contract.STATUS_SEVERITY[p[1]], p[0]))
        h.slow_peers.sort()
    for finding in Finding.objects.filter(sweep_id__in=latest).order_by("id"):
        for name in names_in(finding.subject):
            h = health.get(name)
            if h is not None and h.sweep_id == finding.sweep_id:
                h.findings.append(finding)


def peer_bandwidth(node: Node, sweep: Sweep | None) -> list[dict]:
    """The node's pairs in one sweep, one row per peer: busbw, the sweep's baseline for the pair, status.

    Worst status first, then by peer name.
    """
    if sweep is None:
        return []
    expected: dict[str, float] = {}
    if sweep.baseline_id is not None:
        for a, b, gbps in BaselinePair.objects.filter(
            Q(node_a=node.name) | Q(node_b=node.name), baseline_id=sweep.baseline_id
        ).values_list("node_a", "node_b", "busbw_gbps"):
            expected[b if a == node.name else a] = gbps
    rows = []
    probes = PairProbe.objects.filter(Q(node_a=node) | Q(node_b=node), sweep=sweep).select_related("node_a", "node_b")
    for p in probes:
        peer = p.node_b.name if p.node_a_id == node.pk else p.node_a.name
        rows.append(
            {
                "peer": peer,
                "probe": p.pk,
                "status": p.status,
                "stage": p.stage,
                "reason": p.reason,
                "busbw_gbps": p.busbw_gbps,
                "baseline_gbps": expected.get(peer),
                "latency_us": p.latency_us_p50,
            }
        )
    rows.sort(key=lambda r: (-contract.STATUS_SEVERITY.get(r["status"], -1), r["peer"]))
    return rows
