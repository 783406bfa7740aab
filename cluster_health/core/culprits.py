"""Culprits inferred over the whole matrix: the node, the group pair or the link behind failures. Pure.

A scatter of failing cells is often one cause seen from several pairs: a node that
accepts no inbound connection fails exactly the pairs where a peer had to connect
to it; an uplink between two racks fails exactly the pairs that cross it; a slow
NIC slows every link of its node. Each rule names its culprit, the numbers behind
it, and the pairs that support it; the pairs it explains are not reported again
as single links.

Pairs are dicts with ``a`` (rank 0, which hosts the store), ``b``, ``status``,
``stage``, ``reason``, ``busbw_gbps`` and ``evidence`` (cluster_health.core.evidence).
A node's group is the one declared for it (``declared``: name -> group, from the
operators' topology), else the one its name gives through the hostname pattern.
"""

from __future__ import annotations

import re
from bisect import bisect_left, bisect_right
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Mapping
from statistics import median
from typing import Any, TypeVar

from agents import contract
from cluster_health import vocabulary
from cluster_health.core import evidence as pair_evidence

T = TypeVar("T")

BAD = vocabulary.BAD_STATUSES
# Pairs that worked: passed, or bad once and fine (transient) or busy (contended) when the confirmation pass
# probed them again. A pair the pass cleared still counts among its peers, else a few noisy links cleared as
# transient would leave a slow node too few links to be compared with.
PASSED = (*contract.PASSED_STATUSES, *vocabulary.CONFIRMATION_STATUSES)
CONNECT_STAGES = ("connect", "store")  # where a pair stops when its store connection failed
MIN_SUPPORT = 2  # pairs a node or group culprit needs behind it
# The default grouping: the name up to its last separator (rack1-n3 -> rack1), else without its trailing digits.
DEFAULT_GROUP_PATTERN = r"^(?:(.+)[-_.][^-_.]+|(.*?)\d+)$"
# A link is slow next to its peers under this share of their median busbw; a node when all its links are.
OUTLIER_LINK_RATIO = 0.33
OUTLIER_NODE_RATIO = 0.5
MIN_PEER_LINKS = 2  # links to compare with before anything is called slow
# ... and only when it is also this many robust standard deviations below them: on a loaded
# host the links scatter widely, and a ratio alone would call the scatter's low end slow.
OUTLIER_Z = 3.5
OUTLIER_NODE_Z = 2.0  # a node's links must all be slow as well, which scatter seldom does
MAD_TO_SIGMA = 1.4826
DEVIATION_STEPS = 200  # bisection steps for a median deviation: a float's precision is reached well before
# Below this message size an all_reduce's time is latency and scheduling, not the link's speed
# (nccl-tests' busbw curves flatten only past the MiB range): links are compared above it only.
OUTLIER_MIN_BYTES = 1 << 20
MAX_LISTED = 12  # pairs named in a finding's text (all of them are in its ``pairs``)
DECLARED = "declared topology"
FROM_PATTERN = "hostname pattern"


def pair_name(p: dict[str, Any]) -> str:
    return f"{p['a']}<->{p['b']}"


def group_of(name: str, pattern: str | None = None) -> str:
    """The group (rack, leaf, rail) a node belongs to, from its name."""
    m = re.match(pattern or DEFAULT_GROUP_PATTERN, name)
    if not m:
        return name
    found = [g for g in m.groups() if g]
    return found[0] if found else name


def node_groups(
    names: Iterable[str], pattern: str | None = None, declared: Mapping[str, str] | None = None
) -> dict[str, tuple[str, str]]:
    """Each node's group and where it comes from (DECLARED or FROM_PATTERN): a declared group wins."""
    declared = declared or {}
    return {n: (declared[n], DECLARED) if declared.get(n) else (group_of(n, pattern), FROM_PATTERN) for n in names}


def _group_sources(g: str, h: str, placed: dict[str, tuple[str, str]]) -> str:
    """Where two groups come from, for a finding: "groups from the declared topology", or each group's own."""

    def source(group: str) -> str:
        return " and the ".join(sorted({src for grp, src in placed.values() if grp == group}))

    if source(g) == source(h):
        return f"groups from the {source(g)}"
    return f"{g} from the {source(g)}, {h} from the {source(h)}"


def _finding(
    severity: str, code: str, subject: str, text: str, pairs: list[dict[str, Any]], chain: list[str], next_step: str
) -> dict[str, Any]:
    return {
        "severity": severity,
        "code": code,
        "subject": subject,
        "text": text,
        "pairs": [pair_name(p) for p in pairs],
        "detail": {"evidence": chain, "next_step": next_step},
    }


def _listed(pairs: list[dict[str, Any]]) -> str:
    names = [pair_name(p) for p in pairs[:MAX_LISTED]]
    more = f" and {len(pairs) - MAX_LISTED} more" if len(pairs) > MAX_LISTED else ""
    return ", ".join(names) + more


def _store_connection(p: dict[str, Any]) -> dict[str, Any] | None:
    """The store connection of a pair (b -> a), from its evidence or, without any, from where it stopped."""
    for c in (p.get("evidence") or {}).get("connections") or []:
        if c.get("step") == "store":
            return dict(c)
    if (
        p["status"] in BAD
        and p.get("stage") in CONNECT_STAGES
        # Only the dial itself fails this way; a store_timeout may come after a dial that worked
        # (joining, or waiting in the store) or with none (the master never published its port).
        and p.get("reason") in ("connect_timeout", "refused")
    ):
        return {"from": p["b"], "to": p["a"], "step": "store", "ok": False}
    if p["status"] in PASSED or p.get("stage") in ("init", "collective", "bandwidth"):
        return {"from": p["b"], "to": p["a"], "step": "store", "ok": True}
    return None


def _peers_connect_elsewhere(node: str, peers: set[str], pairs_of: Mapping[str, list[dict[str, Any]]]) -> bool:
    """Whether every peer that could not connect in to the node passed a pair without it."""
    return all(
        any(q["status"] in PASSED and node not in (q["a"], q["b"]) for q in pairs_of.get(peer, ())) for peer in peers
    )


def pairs_by_node(pairs: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """Each node's pairs, in one pass (a rule that scanned every pair for each node was quadratic)."""
    out: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for p in pairs:
        out[p["a"]].append(p)
        out[p["b"]].append(p)
    return out


def _inbound_blocked_finding(
    node: str,
    failed_in: list[dict[str, Any]],
    inbound: list[tuple[dict[str, Any], dict[str, Any]]],
    outbound: list[tuple[dict[str, Any], dict[str, Any]]],
) -> dict[str, Any]:
    """Fail finding for a node whose inbound store connections all failed while its outbound ones worked."""
    later = [p for p, _ in outbound if p["status"] in BAD]
    support = failed_in + later
    out_names = ", ".join(sorted({c["to"] for _, c in outbound}))
    text = (
        f"{node} accepts no inbound connection from any peer ({len(failed_in)} of {len(inbound)} peers could not "
        f"connect to its store: {_listed(failed_in)}) while it connects out fine (to {out_names}): open its "
        "firewall for the store port and Gloo's ephemeral range"
    )
    if later:
        text += (
            f"; {len(later)} pair(s) where it connected out then failed when the peer dialled back ({_listed(later)})"
        )
    chain = [
        f"{p['b']} -> {p['a']} (store on {p['a']}): {p['status']} at {p.get('stage')} ({p.get('reason')})"
        for p in failed_in
    ] + [f"{c['from']} -> {c['to']} (store): connected" for _, c in outbound]
    step = (
        f"on {node}, allow new inbound TCP connections (nft/iptables input chain) for the store "
        "port and the ephemeral range Gloo and NCCL listen on"
    )
    return _finding("fail", "inbound_blocked", node, text, support, chain, step)


def inbound_blocked(
    nodes: Iterable[str], pairs: list[dict[str, Any]], explained: frozenset[str] | set[str] = frozenset()
) -> list[dict[str, Any]]:
    """Nodes no peer could connect to, while they connected out fine: a firewall on inbound connections.

    Rank 0 hosts the store, so a peer connects in; as rank 1 the node connects out. Gloo
    and NCCL then listen on both sides and either may dial, so a later failure of a pair
    where the node connected out is consistent with it, and never counts against it.
    """
    out = []
    pairs_of = pairs_by_node(pairs)
    for node in nodes:
        conns = [(p, _store_connection(p)) for p in pairs_of.get(node, ())]
        inbound = [(p, c) for p, c in conns if c and c["to"] == node]
        outbound = [(p, c) for p, c in conns if c and c["from"] == node]
        failed_in = [p for p, c in inbound if c["ok"] is False]
        if failed_in and all(pair_name(p) in explained for p in failed_in):
            continue  # a failing segment explains them better
        if len(failed_in) < MIN_SUPPORT or len(failed_in) != len(inbound):
            continue
        if not outbound or not all(c["ok"] for _, c in outbound):
            continue
        # The peers that could not connect in must connect elsewhere, or the fault is theirs.
        peers = {p["a"] if p["b"] == node else p["b"] for p in failed_in}
        if not _peers_connect_elsewhere(node, peers, pairs_of) and len(pairs_of) > 2:
            continue
        out.append(_inbound_blocked_finding(node, failed_in, inbound, outbound))
    return out


def nodes_of(pairs: list[dict[str, Any]]) -> set[str]:
    return {n for p in pairs for n in (p["a"], p["b"])}


def by_group(
    items: list[T], groups: Mapping[str, str], pair_of: Callable[[T], dict[str, Any]]
) -> tuple[dict[str, list[T]], dict[tuple[str, str], list[T]]]:
    """Items split by where their pair lies: inside one group (by group), or across two (by the sorted group pair)."""
    inside: dict[str, list[T]] = defaultdict(list)
    across: dict[tuple[str, str], list[T]] = defaultdict(list)
    for item in items:
        pair = pair_of(item)
        g, h = sorted((groups[pair["a"]], groups[pair["b"]]))
        (inside[g] if g == h else across[(g, h)]).append(item)
    return inside, across


def segments(
    pairs: list[dict[str, Any]], pattern: str | None = None, declared: Mapping[str, str] | None = None
) -> list[dict[str, Any]]:
    """Group pairs whose every crossing pair fails while each group works inside: an uplink, a spine, a rail."""
    placed = node_groups(nodes_of(pairs), pattern, declared)
    groups = {n: g for n, (g, _) in placed.items()}
    if len(set(groups.values())) < 2:
        return []
    inside, across = by_group(pairs, groups, lambda p: p)
    out = []
    for (g, h), cross in sorted(across.items()):
        bad = [p for p in cross if p["status"] in BAD]
        if len(bad) < MIN_SUPPORT or len(bad) != len(cross):
            continue
        within = inside.get(g, []) + inside.get(h, [])
        if not within or any(p["status"] in BAD for p in within):
            continue  # a group broken inside is a node or group problem, not the path between them
        reasons = sorted({p.get("reason") or p["status"] for p in bad})
        sources = _group_sources(g, h, placed)
        text = (
            f"every pair between {g} and {h} fails ({len(bad)} of {len(cross)}: {', '.join(reasons)}) while "
            f"each group works inside ({len(within)} pairs ok; {sources}): check the uplink, spine port or "
            f"cabling between {g} and {h}"
        )
        chain = [sources] + [f"{pair_name(p)}: {p['status']} at {p.get('stage')} ({p.get('reason')})" for p in bad]
        chain += [f"{pair_name(p)} (inside {groups[p['a']]}): {p['status']}" for p in within]
        out.append(
            _finding(
                "fail",
                "segment",
                f"{g}<->{h}",
                text,
                bad,
                chain,
                f"test the links between {g} and {h} at the switch: uplink and spine ports, "
                "their error counters and cabling",
            )
        )
    return out


def common_node(pairs: list[dict[str, Any]], explained: set[str]) -> list[dict[str, Any]]:
    """A node that is the common factor of the remaining failures (at least two, all of which touch it)."""
    # An offline agent is blamed by the per-node rule from its heartbeats.
    bad = [p for p in pairs if p["status"] in BAD and p["status"] != "offline" and pair_name(p) not in explained]
    if len(bad) < MIN_SUPPORT:
        return []
    shared = set.intersection(*({p["a"], p["b"]} for p in bad))
    if len(shared) != 1:
        return []
    node = shared.pop()
    mine = [p for p in pairs if node in (p["a"], p["b"])]
    if len(bad) == len(mine):
        return []  # every pair of the node failed: the per-node rule already blames it
    reasons = sorted({p.get("reason") or p["status"] for p in bad})
    text = (
        f"{node} is the common factor of every failing pair ({len(bad)} of its {len(mine)} pairs fail: "
        f"{', '.join(reasons)}; {_listed(bad)}): look at {node} first"
    )
    chain = [f"{pair_name(p)}: {p['status']} at {p.get('stage')} ({p.get('reason')})" for p in bad]
    return [
        _finding(
            "fail",
            "node_common_factor",
            node,
            text,
            bad,
            chain,
            f"check {node}'s firewall, interface and agent logs; its passing pairs show what still works",
        )
    ]


def lossy_nodes(pairs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Nodes that retransmitted a share of their segments with most of their peers: a bad cable, optic or port.

    The node is the common factor: most of its own probes show the share (random loss spares
    one now and then), while most probes of the pairs without it do not.
    """
    per_node: dict[str, list[tuple[dict[str, Any], float, int]]] = defaultdict(list)
    lossy_pairs: set[str] = set()
    for p in pairs:
        ev = p.get("evidence") or {}
        for role in ("a", "b"):
            side = ev.get(role)
            if side:
                pct, sent = pair_evidence.retrans(side)
                if sent >= pair_evidence.LOSSY_MIN_SEGMENTS:
                    per_node[p[role]].append((p, pct, sent))
                    if pct >= pair_evidence.LOSSY_RETRANS_PCT:
                        lossy_pairs.add(pair_name(p))
    # Links without a node, and lossy ones among them, counted as all links less the node's own.
    ends = {pair_name(p): (p["a"], p["b"]) for p in pairs}
    touching = Counter(n for link in ends.values() for n in link)
    lossy_touching = Counter(n for name in lossy_pairs for n in ends[name])
    out = []
    for node, counted in sorted(per_node.items()):
        lossy = [(p, pct, sent) for p, pct, sent in counted if pct >= pair_evidence.LOSSY_RETRANS_PCT]
        if len(lossy) < MIN_SUPPORT or 2 * len(lossy) <= len(counted):
            continue
        without = len(ends) - touching[node]
        if without and 2 * (len(lossy_pairs) - lossy_touching[node]) >= without:
            continue  # most links lose packets: the fabric, not this node
        total_sent = sum(sent for _, _, sent in lossy)
        pct = sum(p * s for _, p, s in lossy) / total_sent
        peers = "every peer" if len(lossy) == len(counted) else f"{len(lossy)} of its {len(counted)} peers"
        text = (
            f"{node} retransmitted {pct:.1f} % of segments with {peers} ({len(lossy)} probes, "
            f"{total_sent} segments): check its cable or optic"
        )
        chain = [f"{pair_name(p)}: {node} retransmitted {x:.1f} % of {s} segments" for p, x, s in counted]
        step = f"read {node}'s NIC error counters (ethtool -S), reseat or replace its cable or optic"
        out.append(_finding("warn", "lossy", node, text, [p for p, _, _ in lossy], chain, step))
    return out


def _largest_common_size(pairs: list[dict[str, Any]]) -> int | None:
    """The size links are compared at: the largest that at least half the measured pairs reached.

    A node so slow that its pairs never got past the small sizes must not pull the comparison
    down to a size where busbw is latency (which would compare nothing): its pairs are judged
    by their own largest size (``_bw_at``). Else the size most pairs measured.
    """
    counts: dict[int, int] = defaultdict(int)
    measured = 0
    for p in pairs:
        sizes = {row["bytes"] for row in p.get("sizes") or [] if isinstance(row, dict) and row.get("bytes")}
        measured += bool(sizes)
        for size in sizes:
            counts[size] += 1
    if not counts:
        return None
    by_half = [s for s, n in counts.items() if 2 * n >= measured]
    return max(by_half) if by_half else max(counts, key=lambda s: (counts[s], s))


def _bw_at(p: dict[str, Any], size: int | None) -> float | None:
    """busbw at the common size, or at the pair's own largest when it never got there (a slow one).

    A ``transient`` pair: its second look's busbw, what the confirmation pass found it runs at.
    """
    if p["status"] == "transient":
        again = (((p.get("evidence") or {}).get("confirmation") or {}).get("again")) or {}
        return again.get("busbw_gbps")
    rows = [r for r in p.get("sizes") or [] if isinstance(r, dict)]
    at = next((r["busbw_gbps"] for r in rows if r.get("bytes") == size), None)
    return at if at is not None else p.get("busbw_gbps")


def _slow_node(node: str, mine: list[tuple[dict[str, Any], float]], without: Reference) -> dict[str, Any] | None:
    """Warn finding for a node all of whose links are slow next to the links without it, else None."""
    if len(mine) < MIN_PEER_LINKS or without.count < MIN_PEER_LINKS:
        return None
    ref = without.median
    mine_bw = [bw for _, bw in mine]
    # Every link under half the others' median, and apart from them: either each is slower than
    # every link without the node (what a slow NIC does, and all a 4-node sweep's 3 reference links
    # can show), or the median sits far below their robust spread (larger fleets, noisier links).
    if not all(bw < OUTLIER_NODE_RATIO * ref for bw in mine_bw):
        return None
    if not (max(mine_bw) < without.minimum or without.far_below(median(mine_bw), OUTLIER_NODE_Z)):
        return None
    mid = median(bw for _, bw in mine)
    # Each count beside what it counts: "(4 links)" after the reference read as the reference's count,
    # and beside an evidence list of the node's links and one reference line, as a miscount.
    text = (
        f"every link of {node} is slow next to its peers: its {len(mine)} measured links at median busbw "
        f"{mid:.3g} GB/s, {mid / ref:.2f} x the {ref:.3g} GB/s of the {without.count} links without it: "
        f"check {node}'s NIC speed, cable and any rate limit"
    )
    chain = [f"{pair_name(p)}: {bw:.3g} GB/s" for p, bw in mine] + [
        f"compared with the {without.count} links without {node}: median {ref:.3g} GB/s"
    ]
    found = _finding(
        "warn",
        "slow_node",
        node,
        text,
        [p for p, _ in mine],
        chain,
        f"compare {node}'s link speed (ethtool), its qdisc (tc) and NIC counters with a peer's",
    )
    found["detail"]["reference_gbps"] = ref  # what its links were compared with
    found["detail"]["busbw_gbps"] = mid  # what they run at (core/problems.py says it in its line)
    return found


def _slow_links(rest: list[tuple[dict[str, Any], float]]) -> list[dict[str, Any]]:
    """Warn findings for single links far below the sweep's median, among links no node or segment explains."""
    out: list[dict[str, Any]] = []
    if len(rest) <= MIN_PEER_LINKS:
        return out
    links = Reference([bw for _, bw in rest])
    ref = links.median
    for p, bw in rest:
        if bw < OUTLIER_LINK_RATIO * ref and links.without([bw]).far_below(bw):
            found = _finding(
                "warn",
                "slow_link",
                pair_name(p),
                f"{pair_name(p)} runs at {bw:.3g} GB/s, {bw / ref:.2f} x the sweep's median {ref:.3g} GB/s",
                [p],
                [f"{pair_name(p)}: {bw:.3g} GB/s"],
                f"check the cabling and ports between {p['a']} and {p['b']}",
            )
            found["detail"]["reference_gbps"] = ref
            found["detail"]["busbw_gbps"] = bw
            out.append(found)
    return out


def outliers(
    pairs: list[dict[str, Any]], pattern: str | None = None, declared: Mapping[str, str] | None = None
) -> list[dict[str, Any]]:
    """Links slow next to their peers in the same sweep, and the node when all its links are the slow ones.

    No history is needed: a first sweep of a new cluster compares each link with the others
    of the same size. A node is compared with the links that do not touch it, so one slow
    node cannot drag the reference down with it.
    """
    size = _largest_common_size(pairs)
    if size is None or size < OUTLIER_MIN_BYTES:
        return []
    measured = [(p, bw) for p in pairs if p["status"] in PASSED and (bw := _bw_at(p, size)) is not None and bw > 0]
    out: list[dict[str, Any]] = []
    slow_nodes: set[str] = set()
    placed = node_groups(nodes_of(pairs), pattern, declared)
    # A node is held against the links of each kind (_links_by_kind) it has enough of, and is slow only when it
    # is slow in every one of them: its one link through an uplink does not make a node with fine links inside
    # its rack slow, nor do its links to the rack its label names make a node cabled elsewhere slow (the
    # topology mismatch says that).
    judged: dict[str, list[dict[str, Any] | None]] = defaultdict(list)
    for kind in _links_by_kind(measured, placed):
        links_of: dict[str, list[tuple[dict[str, Any], float]]] = defaultdict(list)
        for p, bw in kind:
            links_of[p["a"]].append((p, bw))
            links_of[p["b"]].append((p, bw))
        every = Reference([bw for _, bw in kind])
        for node, mine in links_of.items():
            without = every.without([bw for _, bw in mine])
            if len(mine) >= MIN_PEER_LINKS and without.count >= MIN_PEER_LINKS:
                judged[node].append(_slow_node(node, mine, without))
    for node in sorted(judged):
        kinds = judged[node]
        if all(kinds):
            out.append(_one_slow_node([f for f in kinds if f is not None]))
            slow_nodes.add(node)
    rest = [(p, bw) for p, bw in measured if not ({p["a"], p["b"]} & slow_nodes)]
    slow_segments, in_segments = _slow_segments(rest, placed)
    out += slow_segments
    for kind in _links_by_kind([(p, bw) for p, bw in rest if pair_name(p) not in in_segments], placed):
        out += _slow_links(kind)
    return out


def _one_slow_node(kinds: list[dict[str, Any]]) -> dict[str, Any]:
    """A node slow in each kind of its links, as one finding: the words of the kind with the most links, every
    link of each kind behind it (the confirmation pass and the cell marks read them all)."""
    found = max(kinds, key=lambda f: len(f["pairs"]))
    if len(kinds) == 1:
        return found
    others = [f for f in kinds if f is not found]
    return {
        **found,
        "pairs": [name for f in [found, *others] for name in f["pairs"]],
        "detail": {
            **found["detail"],
            "evidence": [line for f in [found, *others] for line in f["detail"]["evidence"]],
        },
    }


def _links_by_kind(
    links: list[tuple[dict[str, Any], float]], placed: dict[str, tuple[str, str]]
) -> list[list[tuple[dict[str, Any], float]]]:
    """Links split by what they cross: those between two declared groups apart from the rest (the slow-node
    and slow-link rules compare within a kind).

    A path through an uplink is not a path inside a rack: held against the racks' links, a healthy
    crossing link reads as slow whenever the uplink is oversubscribed, and a topology sweep, which
    probes one or two pairs across each group pair besides its uplink rounds, would call its lone
    crossing pair slow every night. Each kind is compared with its own; a kind of too few links
    has no peers and no link of it is called slow here (baselines still judge it: sweeps/closing.py).
    Groups from the hostname pattern are a guess about names, not about cables: they split nothing.
    """

    def across(p: dict[str, Any]) -> bool:
        (g, src_g), (h, src_h) = placed[p["a"]], placed[p["b"]]
        return g != h and src_g == DECLARED and src_h == DECLARED

    crossing = [(p, bw) for p, bw in links if across(p)]
    if not crossing:
        return [links]
    return [[(p, bw) for p, bw in links if not across(p)], crossing]


def _far_below(value: float, reference: list[float], z: float = OUTLIER_Z) -> bool:
    """Whether value lies more than z robust standard deviations below the reference values."""
    return Reference(reference).far_below(value, z)


class Reference:
    """Link speeds to compare with: median, robust spread (MAD) and minimum, also of the set less a few values.

    A node's links are compared with every link without it, and each link with all the others: at
    1,024 nodes that is 523,776 values less 1,023 (or 1), for each node (or link). Copying and sorting
    the rest each time is quadratic (hours at 1,024 nodes); here the values are sorted once, and the
    statistics of the set less some of its values are found by counting with bisection, exactly.
    """

    def __init__(self, values: Iterable[float], removed: list[float] | None = None, _sorted: list[float] | None = None):
        self.values = _sorted if _sorted is not None else sorted(values)
        self.removed = removed or []  # sorted, each one of ``values``
        self.count = len(self.values) - len(self.removed)

    def without(self, removed: Iterable[float]) -> Reference:
        return Reference((), sorted(removed), self.values)

    def _at_most(self, v: float) -> int:
        return bisect_right(self.values, v) - bisect_right(self.removed, v)

    def _rank(self, r: int) -> float:
        """The r-th smallest (from 0) of the values left."""
        lo, hi = 0, len(self.values) - 1
        while lo < hi:
            mid = (lo + hi) // 2
            if self._at_most(self.values[mid]) >= r + 1:
                hi = mid
            else:
                lo = mid + 1
        return self.values[lo]

    @property
    def minimum(self) -> float:
        return self._rank(0)

    @property
    def median(self) -> float:
        n = self.count
        return self._rank(n // 2) if n % 2 else (self._rank(n // 2 - 1) + self._rank(n // 2)) / 2

    def _within(self, mid: float, t: float) -> int:
        """Values left no further than t from mid."""

        def inside(xs: list[float]) -> int:
            return bisect_right(xs, mid + t) - bisect_left(xs, mid - t)

        return inside(self.values) - inside(self.removed)

    def _deviation(self, mid: float, r: int) -> float:
        """The r-th smallest (from 0) distance from mid among the values left."""
        if self._within(mid, 0.0) >= r + 1:
            return 0.0
        lo, hi = 0.0, max(mid - self.values[0], self.values[-1] - mid)
        for _ in range(DEVIATION_STEPS):
            t = (lo + hi) / 2
            if t in (lo, hi):
                break
            if self._within(mid, t) >= r + 1:
                hi = t
            else:
                lo = t
        return hi

    @property
    def spread(self) -> float:
        """MAD_TO_SIGMA x the median absolute deviation from the median."""
        mid, n = self.median, self.count
        mad = (
            self._deviation(mid, n // 2)
            if n % 2
            else (self._deviation(mid, n // 2 - 1) + self._deviation(mid, n // 2)) / 2
        )
        return MAD_TO_SIGMA * mad

    def far_below(self, value: float, z: float = OUTLIER_Z) -> bool:
        """Whether value lies more than z robust standard deviations below these values."""
        spread = self.spread
        return spread == 0 or (self.median - value) / spread > z


def _slow_segments(
    measured: list[tuple[dict[str, Any], float]], placed: dict[str, tuple[str, str]]
) -> tuple[list[dict[str, Any]], set[str]]:
    """Group pairs whose crossing links are all slow next to the links inside both groups (placed: node_groups)."""
    groups = {n: g for n, (g, _) in placed.items()}
    inside, across = by_group(measured, groups, lambda m: m[0])
    out, named = [], set()
    judged = {pair: links for pair, links in across.items() if len(links) >= MIN_PEER_LINKS}
    for (g, h), links in sorted(across.items()):
        within = [bw for _, bw in inside.get(g, []) + inside.get(h, [])]
        # A reference of one link has no spread to tell a slow path from a loaded host's scatter: a 4-node
        # sweep with a slow node taken out leaves its rack-mate's two links across against a single link inside.
        if len(links) < MIN_PEER_LINKS or len(within) < MIN_PEER_LINKS:
            continue
        ref = median(within)
        if not all(bw < OUTLIER_NODE_RATIO * ref for _, bw in links) or not _far_below(
            median(bw for _, bw in links), within
        ):
            continue
        # Where two other group pairs or more were measured, a slow path is slow next to the other paths across
        # too: every uplink as slow as this one is the fabric's oversubscription, not this uplink's fault.
        others = [bw for pair, other in judged.items() if pair != (g, h) for _, bw in other]
        if len(judged) - 1 >= MIN_PEER_LINKS and not (
            median(bw for _, bw in links) < OUTLIER_NODE_RATIO * median(others)
            and _far_below(median(bw for _, bw in links), others)
        ):
            continue
        mid = median(bw for _, bw in links)
        named |= {pair_name(p) for p, _ in links}
        sources = _group_sources(g, h, placed)
        slow = _finding(
            "warn",
            "segment",
            f"{g}<->{h}",
            f"every link between {g} and {h} is slow ({len(links)} links, median {mid:.3g} GB/s, {mid / ref:.2f} x "
            f"the {ref:.3g} GB/s inside the groups; {sources}): check the uplink between {g} and {h}",
            [p for p, _ in links],
            [sources]
            + [f"{pair_name(p)}: {bw:.3g} GB/s" for p, bw in links]
            + [f"inside {g} and {h}: median {ref:.3g} GB/s"],
            f"test the uplink between {g} and {h}: port speed, errors, cabling",
        )
        slow["detail"]["reference_gbps"] = ref
        out.append(slow)
    return out, named


def infer(
    nodes: Iterable[str],
    pairs: list[dict[str, Any]],
    pattern: str | None = None,
    declared: Mapping[str, str] | None = None,
    offline: Iterable[str] = (),
) -> list[dict[str, Any]]:
    """Every matrix-wide finding: inbound-blocked nodes, failing segments, a common node, lossy nodes, outliers.

    pattern: the hostname pattern (DEFAULT_GROUP_PATTERN when None); declared: node name -> its
    declared topology group, which wins over the pattern for that node; offline: nodes whose agent
    was silent (offline when planned, or as the sweep ends): their bad pairs are theirs, and no
    segment, inbound or common-factor rule counts them.
    """
    nodes = list(nodes)
    failing = without_offline_pairs(pairs, offline)
    found = segments(failing, pattern, declared)
    found += inbound_blocked(nodes, failing, {name for f in found for name in f["pairs"]})
    explained = {name for f in found for name in f["pairs"]}
    found += common_node(failing, explained)
    return found + lossy_nodes(pairs) + outliers(pairs, pattern, declared)


def without_offline_pairs(pairs: list[dict[str, Any]], offline: Iterable[str]) -> list[dict[str, Any]]:
    """The pairs less the bad ones of an offline node: those are the node's (its own finding names it).

    A peer's pair with a node whose agent stopped times out or goes offline on the node's account;
    counted against the peer, they would make it the "common factor" of a firewalled link and a
    dead node together.
    """
    gone = set(offline)
    if not gone:
        return pairs
    return [p for p in pairs if not (p["status"] in BAD and (p["a"] in gone or p["b"] in gone))]


def explained_pairs(found: list[dict[str, Any]]) -> set[str]:
    """The failing pairs a fail finding of this module explains (not to be reported again as single links)."""
    return {name for f in found if f["severity"] == "fail" for name in f["pairs"]}
