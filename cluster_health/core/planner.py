"""Sweep planning: which pairs run in which round. Pure: no Django, no I/O.

All-pairs work uses the circle method: with N nodes (N even) there are N-1 rounds
of N/2 disjoint pairs, so every pair meets exactly once and no node is in two
probes at the same time. Odd N gets a bye: one node sits out each round.
Pairs are oriented so that ``a`` comes before ``b`` in the node order; ``a`` is
rank 0 of the probe and hosts the store.

For large fleets, three kinds cover the nodes in far fewer rounds (docs/CONTROL_PLANE.md,
"Large fleets"): ``sampled`` draws some of the circle rounds over a seeded shuffle,
``topology`` runs every pair inside each group and one between every two groups, and
``bisect`` starts as ``quick`` and adds rounds around the suspects (``bisect_pairs``).
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from cluster_health import vocabulary

SAMPLED_ROUNDS = 8  # a sampled sweep's rounds unless the request says: every node in each, 8 partners in all
QUICK_ROUNDS = 2  # two circle rounds put every node in at least one pair, also the round-one bye of odd N
# A bisect sweep tests each suspect against this many nodes no failure touched: the node culprit
# rule wants MIN_SUPPORT (2) pairs behind a node, and two agreeing partners tell a node from a link.
BISECT_PARTNERS = 2
BISECT_MAX_PHASES = 3  # the quick phase, then at most two rounds of partners around the suspects


class PlanError(ValueError):
    """The request cannot be planned; the text says why."""


@dataclass
class Plan:
    """Rounds of disjoint pairs, plus whether a group collective follows them, or a gpu check on every node."""

    nodes: list[str]
    rounds: list[list[tuple[str, str]]] = field(default_factory=list)
    group: bool = False
    gpu_checks: bool = False

    @property
    def pair_count(self) -> int:
        return sum(len(r) for r in self.rounds)


def _orient(a: str, b: str, position: dict[str, int]) -> tuple[str, str]:
    return (a, b) if position[a] < position[b] else (b, a)


def circle_rounds(nodes: Sequence[str], limit: int | None = None) -> list[list[tuple[str, str]]]:
    """All pairs in N-1 rounds (N even) or N rounds with one bye each (N odd).

    ``limit`` stops after that many rounds (the quick sweep).
    """
    names = list(nodes)
    if len(set(names)) != len(names):
        raise PlanError("nodes: a node is listed twice")
    if len(names) < 2:
        return []
    position = {n: i for i, n in enumerate(names)}
    total = circle_round_count(len(names))
    return [circle_round(names, r, position) for r in range(total if limit is None else min(limit, total))]


def circle_round_count(n: int) -> int:
    """Rounds of the circle method over n nodes: n-1 for even n, n for odd n (one bye a round)."""
    return n - 1 if n % 2 == 0 else n


def circle_round(order: Sequence[str], r: int, position: dict[str, int]) -> list[tuple[str, str]]:
    """Round r of the circle method over ``order``, each pair oriented by ``position`` (O(N), no other round built).

    Position 0 stays fixed and the others rotate one step per round; with odd N an empty
    seat rotates with them, and whoever faces it sits the round out.
    """
    ring: list[str | None] = list(order) + ([None] if len(order) % 2 else [])
    m = len(ring)
    rest = ring[1:]
    rot = rest[-r:] + rest[:-r] if r else rest
    seats = [ring[0], *rot]
    pairs = []
    for i in range(m // 2):
        a, b = seats[i], seats[m - 1 - i]
        if a is not None and b is not None:
            pairs.append(_orient(a, b, position))
    return pairs


def schedule_pairs(pairs: Iterable[tuple[str, str]], nodes: Sequence[str]) -> list[list[tuple[str, str]]]:
    """Pack an explicit list of pairs into rounds where no node appears twice (greedy, first fit)."""
    position = {n: i for i, n in enumerate(nodes)}
    seen: set[tuple[str, str]] = set()
    rounds: list[list[tuple[str, str]]] = []
    busy: list[set[str]] = []
    for a, b in pairs:
        if a == b:
            raise PlanError(f"pairs: {a}-{b} pairs a node with itself")
        for n in (a, b):
            if n not in position:
                raise PlanError(f"pairs: {n} is not one of the sweep's nodes")
        a, b = _orient(a, b, position)
        if (a, b) in seen:
            continue
        seen.add((a, b))
        for i, used in enumerate(busy):
            if a not in used and b not in used:
                rounds[i].append((a, b))
                used.update((a, b))
                break
        else:
            rounds.append([(a, b)])
            busy.append({a, b})
    return rounds


def sampled_rounds(nodes: Sequence[str], rounds: int, seed: int) -> list[list[tuple[str, str]]]:
    """``rounds`` rounds of random disjoint pairs, the same for the same seed.

    The nodes are shuffled by the seed and ``rounds`` of the circle method's rounds over
    that order are drawn: each round pairs every node (one sits out when N is odd), and
    no pair is drawn twice, so each round meets N/2 links not met before. A node left out of
    every drawn round (odd N, one round) gets a round of its own: no node goes unprobed.
    """
    names = list(nodes)
    if len(names) < 2:
        return []
    position = {n: i for i, n in enumerate(names)}
    rng = random.Random(seed)
    order = names[:]
    rng.shuffle(order)
    total = circle_round_count(len(order))
    picked = sorted(rng.sample(range(total), min(rounds, total)))
    out = [circle_round(order, r, position) for r in picked]
    met = {n for r in out for pair in r for n in pair}
    left = [n for n in order if n not in met]  # odd N and one round: the node that sat it out
    if left:
        out.append([_orient(n, next(m for m in order if m in met), position) for n in left])
    return out


def topology_rounds(nodes: Sequence[str], groups: Mapping[str, str]) -> list[list[tuple[str, str]]]:
    """Every pair inside each group, then one pair between every two groups.

    The groups' own rounds run side by side (they share no node), so the inside part takes
    as many rounds as the largest group needs. Between groups i and j the pair is member
    ``j mod |group i|`` with member ``i mod |group j|``: a group of at least G members sends
    a different node to each of the G-1 others, and those pairs then share a round.
    """
    names = list(nodes)
    members: dict[str, list[str]] = {}
    for n in names:
        if n not in groups:
            raise PlanError(f"topology: {n} has no group")
        members.setdefault(groups[n], []).append(n)
    inside = [circle_rounds(m) for m in members.values()]
    depth = max((len(r) for r in inside), default=0)
    out = [[p for g in inside if k < len(g) for p in g[k]] for k in range(depth)]
    labels = list(members)
    between = []
    for i, gi in enumerate(labels):
        for j in range(i + 1, len(labels)):
            a, b = members[gi], members[labels[j]]
            between.append((a[j % len(a)], b[i % len(b)]))
    return out + schedule_pairs(between, names)


def bisect_suspects(outcomes: Mapping[tuple[str, str], bool]) -> set[str]:
    """The nodes a failed pair touches: after the quick phase, the ones a bisect sweep looks into."""
    return {n for pair, ok in outcomes.items() if not ok for n in pair}


def bisect_pairs(
    nodes: Sequence[str],
    outcomes: Mapping[tuple[str, str], bool],
    suspects: Iterable[str],
    partners: int = BISECT_PARTNERS,
) -> list[tuple[str, str]]:
    """The next bisect phase: each suspect against nodes that passed and are no suspect (clean).

    ``outcomes``: every closed pair so far, True if it passed; pairs with an offline node
    are left out by the caller (the node is already named). ``suspects``: the quick
    phase's (``bisect_suspects``), kept for the later phases, so that a clean partner a
    bad node failed stays clean. A suspect is pinned once it has ``partners`` answers
    from clean nodes that agree (all failed: the node; all passed: not the node, so its
    failed pairs are links, or its peers); one whose answers disagree gets as many again.
    Returns no pair when every suspect is pinned or no clean node is left to test one
    against (a segment split, say: the matrix shows that one).
    """
    position = {n: i for i, n in enumerate(nodes)}
    suspected = set(suspects)
    passed = {n for pair, ok in outcomes.items() if ok for n in pair}
    clean = [n for n in nodes if n in passed and n not in suspected]
    if not clean:
        return []
    checks: dict[str, list[bool]] = {n: [] for n in suspected}
    met: dict[str, set[str]] = {n: set() for n in suspected}
    for (a, b), ok in outcomes.items():
        for s, other in ((a, b), (b, a)):
            if s in checks:
                met[s].add(other)
                if other not in suspected and other in passed:
                    checks[s].append(ok)
    load: Counter[str] = Counter()
    out = []
    for s in sorted(suspected, key=lambda n: position.get(n, len(position))):
        answers = checks[s]
        wanted = partners - len(answers) if len(set(answers)) <= 1 else 2 * partners - len(answers)
        if wanted <= 0:
            continue
        fresh = [c for c in clean if c not in met[s]]
        fresh.sort(key=lambda c: (load[c], (position[c] - position.get(s, 0)) % len(position)))
        for c in fresh[:wanted]:
            load[c] += 1
            out.append(_orient(s, c, position))
    return out


def plan(
    kind: str,
    nodes: Sequence[str],
    pairs: Iterable[tuple[str, str]] | None = None,
    *,
    rounds: int | None = None,
    seed: int = 0,
    groups: Mapping[str, str] | None = None,
) -> Plan:
    """The probes of one sweep of ``kind`` over ``nodes`` (in matrix order).

    ``rounds`` and ``seed``: a sampled sweep's; ``groups``: node -> group, a topology sweep's.
    A bisect sweep is planned as its quick phase; the phases after it depend on its results
    (``bisect_pairs``).
    """
    if kind not in vocabulary.SWEEP_KINDS:
        raise PlanError(f"kind: {kind!r} is not one of {', '.join(vocabulary.SWEEP_KINDS)}")
    names = list(nodes)
    if len(set(names)) != len(names):
        raise PlanError("nodes: a node is listed twice")
    if kind == "pairs":
        if not pairs:
            raise PlanError("pairs: a 'pairs' sweep needs at least one pair")
        return Plan(names, schedule_pairs(pairs, names))
    if kind in vocabulary.GPU_SWEEP_KINDS:
        if not names:
            raise PlanError("nodes: a gpu sweep needs at least 1 node, 0 available")
        return Plan(names, [], gpu_checks=True)  # one local check per node, all at once, no peer
    if len(names) < 2:
        raise PlanError(f"nodes: a {kind} sweep needs at least 2 nodes, {len(names)} available")
    if kind in ("group", "preflight"):
        return Plan(names, [], group=True)
    if kind in ("quick", "bisect"):
        return Plan(names, circle_rounds(names, limit=QUICK_ROUNDS))
    if kind == "sampled":
        return Plan(names, sampled_rounds(names, SAMPLED_ROUNDS if rounds is None else rounds, seed))
    if kind == "topology":
        if groups is None:
            raise PlanError("topology: a topology sweep needs each node's group")
        return Plan(names, topology_rounds(names, groups))
    return Plan(names, circle_rounds(names), group=kind in vocabulary.GROUP_SWEEP_KINDS)
