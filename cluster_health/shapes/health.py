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

from django.db.models import Count, Max, Q

from agents import contract
from cluster_health import vocabulary
from cluster_health.core import fleet
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
    offline_peers: list[str] = field(default_factory=list)  # peers that were offline: those pairs are theirs
    slow_node_peers: list[str] = field(default_factory=list)  # peers found slow themselves: those pairs are theirs
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
    ids = [s.pk for s in sweeps]
    statuses: dict[tuple[int, int], dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for side in ("node_a_id", "node_b_id"):
        counted = PairProbe.objects.filter(sweep_id__in=ids).values_list("sweep_id", side, "status")
        for sweep_id, node_id, status, n in counted.annotate(n=Count("id")).order_by():
            statuses[(sweep_id, node_id)][status] += n
    offline = _give_offline_pairs_to_their_node(ids, statuses)
    slow = _give_slow_pairs_to_their_node(ids, statuses)
    health = {n.name: NodeHealth() for n in nodes}
    for node in nodes:
        h, run_class = health[node.name], None
        for sweep in sweeps:
            counts = statuses.get((sweep.pk, node.pk))
            if counts is None and node.name not in (sweep.nodes or []):
                continue
            result = worst(s for s, n in (counts or {}).items() if n > 0) or "ok"
            cls = result_class(result)
            if h.sweep_id is None:
                h.sweep_id, h.result, run_class = sweep.pk, result, cls
                h.counts = {s: n for s, n in (counts or {}).items() if n > 0}
                h.since_sweep = sweep.pk if cls != "ok" else None
            elif cls == run_class and cls != "ok":
                h.since_sweep = sweep.pk
            else:
                break
    _add_peers_and_findings(health, offline, slow)
    return health


def offline_in(counts: dict[str, int]) -> bool:
    """Whether a node was itself offline in a sweep: every pair of it that was probed is ``offline``."""
    probed = {s for s, n in counts.items() if n > 0 and s != "skipped"}
    return probed == {"offline"}


def _give_offline_pairs_to_their_node(
    ids: list[int], statuses: dict[tuple[int, int], dict[str, int]]
) -> set[tuple[int, int]]:
    """An offline node owns its bad pairs, as the culprit rules blame them: a pair that is offline (or
    timed out) because its peer's agent was silent is not held against the node that answered (it
    counts as ``peer_offline``, which has no severity).

    The offline side of a sweep is the node a ``node_offline`` finding of it names, a side its bad
    pairs' hints say fell silent (``agent_offline``), or a node whose every probed pair was offline. A
    node whose agent died mid-sweep has ok pairs from before: its peers are still not offline.
    Returns the (sweep id, node id) of every node that was offline in its sweep; two queries, and only
    when a pair was offline.
    """
    if not any(counts.get("offline") for counts in statuses.values()):
        return set()
    offline = {key for key, counts in statuses.items() if offline_in(counts)}
    named = set(Finding.objects.filter(sweep_id__in=ids, code="node_offline").values_list("sweep_id", "subject"))
    bad = list(
        PairProbe.objects.filter(sweep_id__in=ids, status__in=vocabulary.BAD_STATUSES)
        .values_list("sweep_id", "node_a_id", "node_b_id", "node_a__name", "node_b__name", "status", "hint")
        .order_by()
    )
    for sweep_id, a, b, a_name, b_name, _, hint in bad:
        gone = fleet.gone_in_hint(hint)
        for node, name in ((a, a_name), (b, b_name)):
            if (sweep_id, name) in named or name in gone:
                offline.add((sweep_id, node))
    _hand_over(statuses, bad, offline, "peer_offline")
    return offline


def _hand_over(statuses, pairs: Iterable[tuple], owners: set[tuple[int, int]], to: str) -> None:
    """Count each of ``pairs`` (sweep id, node a id, node b id, a's name, b's name, status, ...) whose
    other side is one of ``owners`` as ``to`` instead of its status for the side that is not."""
    for sweep_id, a, b, _, _, status, *_ in pairs:
        for me, peer in ((a, b), (b, a)):
            if (sweep_id, peer) in owners and (sweep_id, me) not in owners:
                statuses[(sweep_id, me)][status] -= 1
                statuses[(sweep_id, me)][to] += 1


def _give_slow_pairs_to_their_node(
    ids: list[int], statuses: dict[tuple[int, int], dict[str, int]]
) -> set[tuple[int, int]]:
    """A node found slow owns its slow pairs, as an offline node owns its offline ones: a peer's pair
    that is slow because the other side is (a ``slow_node`` finding names it) is not held against the
    peer (it counts as ``peer_slow``, which has no severity).

    Returns the (sweep id, node id) of every node a ``slow_node`` finding named in its sweep. Two
    queries, and only when a degraded pair was counted."""
    if not any(counts.get("degraded") for counts in statuses.values()):
        return set()
    named = Finding.objects.filter(sweep_id__in=ids, code="slow_node").values_list("sweep_id", "subject")
    slow_names = {(sweep_id, subject) for sweep_id, subject in named}
    if not slow_names:
        return set()
    pairs = list(
        PairProbe.objects.filter(sweep_id__in=ids, status="degraded")
        .values_list("sweep_id", "node_a_id", "node_b_id", "node_a__name", "node_b__name", "status")
        .order_by()
    )
    slow = {
        (sweep_id, node)
        for sweep_id, a, b, a_name, b_name, _ in pairs
        for node, name in ((a, a_name), (b, b_name))
        if (sweep_id, name) in slow_names
    }
    _hand_over(statuses, pairs, slow, "peer_slow")
    return slow


def _add_peers_and_findings(
    health: dict[str, NodeHealth], offline: set[tuple[int, int]], slow: set[tuple[int, int]]
) -> None:
    latest = {h.sweep_id for h in health.values() if h.sweep_id is not None}
    troubled = (
        PairProbe.objects.filter(sweep_id__in=latest, status__in=NOT_PASSING)
        .values_list("sweep_id", "node_a__name", "node_b__name", "status", "node_a_id", "node_b_id")
        .order_by()
    )
    for sweep_id, a, b, status, a_id, b_id in troubled:
        for me, peer, me_id, peer_id in ((a, b, a_id, b_id), (b, a, b_id, a_id)):
            h = health.get(me)
            if h is None or h.sweep_id != sweep_id:
                continue
            if status == "degraded" and (sweep_id, peer_id) in slow and (sweep_id, me_id) not in slow:
                h.slow_node_peers.append(peer)
            elif status == "degraded":
                h.slow_peers.append(peer)
            elif (sweep_id, peer_id) in offline and (sweep_id, me_id) not in offline:
                h.offline_peers.append(peer)
            else:
                h.failing_peers.append((peer, status))
    for h in health.values():
        h.failing_peers.sort(key=lambda p: (-contract.STATUS_SEVERITY[p[1]], p[0]))
        h.slow_peers.sort()
        h.offline_peers.sort()
        h.slow_node_peers.sort()
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


def fastest(sweep: Sweep | None, peers: list[dict]) -> float:
    """The full width of a node page's bandwidth bars: the sweep's fastest pair (or a baseline above it)."""
    best = PairProbe.objects.filter(sweep=sweep).aggregate(best=Max("busbw_gbps"))["best"] if sweep else None
    figures = [best, *(p["baseline_gbps"] for p in peers), *(p["busbw_gbps"] for p in peers)]
    return max((f for f in figures if f), default=1.0)
