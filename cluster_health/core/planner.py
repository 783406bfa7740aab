"""Sweep planning: which pairs run in which round. Pure: no Django, no I/O.

All-pairs work uses the circle method: with N nodes (N even) there are N-1 rounds
of N/2 disjoint pairs, so every pair meets exactly once and no node is in two
probes at the same time. Odd N gets a bye: one node sits out each round.
Pairs are oriented so that ``a`` comes before ``b`` in the node order; ``a`` is
rank 0 of the probe and hosts the store.

For large fleets, three kinds cover the nodes in far fewer rounds (docs/CONTROL_PLANE.md,
"Large fleets"): ``sampled`` draws some of the circle rounds over a seeded shuffle (with
groups: half its rounds inside the groups, half across, every group's uplink in each of those),
``topology`` runs every pair inside each group, one between every two groups and one uplink
round per group (several of its nodes sending out at once: docs/TOPOLOGY.md, "Uplinks"), and
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
# A quick sweep that prefers the stalest pairs (a gang check's) reads every pair's last measured time among its
# nodes; past this many nodes (32,640 pairs) it is a plain quick sweep.
PREFERRED_MAX_NODES = 256
# A bisect sweep tests each suspect against this many nodes no failure touched: the node culprit
# rule wants MIN_SUPPORT (2) pairs behind a node, and two agreeing partners tell a node from a link.
BISECT_PARTNERS = 2
BISECT_MAX_PHASES = 3  # the quick phase, then at most two rounds of partners around the suspects
# A topology sweep's uplink round for a group: this many of its nodes each probe a node of another group at
# once, so that the group's uplink, not one node's link, limits what they sum to.
UPLINK_SENDERS = 4


class PlanError(ValueError):
    """The request cannot be planned; the text says why."""


@dataclass
class Plan:
    """Rounds of disjoint pairs, plus whether a group collective follows them, or a gpu check on every node."""

    nodes: list[str]
    rounds: list[list[tuple[str, str]]] = field(default_factory=list)
    group: bool = False
    gpu_checks: bool = False
    uplinks: dict[int, str] = field(default_factory=dict)  # a topology sweep's: round index (0-based) -> group

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


def preferred_rounds(
    names: Sequence[str], preferred: Iterable[tuple[str, str]], count: int
) -> list[list[tuple[str, str]]]:
    """``count`` rounds like a quick sweep's (each node with a partner it has not met in an earlier round; for odd
    N one bye a round), their pairs taken in ``preferred``'s order first: a gang check prefers the pairs measured
    longest ago (coverage.stalest_first), so the checks before jobs also cover the pairs that idle gaps rarely
    reach. Pairs of nodes not in ``names`` are ignored; nodes the preferred pairs leave over meet each other."""
    names = list(names)
    if len(set(names)) != len(names):
        raise PlanError("nodes: a node is listed twice")
    position = {n: i for i, n in enumerate(names)}
    wanted = [(a, b) for a, b in preferred if a in position and b in position and a != b]
    used: set[frozenset[str]] = set()
    out: list[list[tuple[str, str]]] = []
    benched: list[str] = []  # nodes that sat a round out: they meet someone first in the next
    for _ in range(min(count, circle_round_count(len(names)) if len(names) >= 2 else 0)):
        free, found = set(names), []
        for n in benched:
            partner = next(
                (
                    b if a == n else a
                    for a, b in wanted
                    if n in (a, b) and {a, b} <= free and frozenset((a, b)) not in used
                ),
                None,
            ) or next((m for m in names if m != n and m in free and frozenset((n, m)) not in used), None)
            if n in free and partner is not None:
                found.append((n, partner))
                free -= {n, partner}
        for a, b in wanted:
            if len(free) < 2:
                break
            if a in free and b in free and frozenset((a, b)) not in used:
                found.append((a, b))
                free -= {a, b}
        left = [n for n in names if n in free]
        while len(left) >= 2:
            a = left.pop(0)
            met = next((m for m in left if frozenset((a, m)) not in used), None)
            if met is None:  # every other one left met a already: swap partners with a pair of this round
                b = left[0]
                k = next(
                    (k for k, (c, d) in enumerate(found) if not used & {frozenset((a, c)), frozenset((b, d))}),
                    None,
                )
                if k is None:
                    continue  # a bye this round
                c, d = found[k]
                found[k] = (a, c)
                a = d
            else:
                b = met
            left.remove(b)
            found.append((a, b))
        used |= {frozenset(p) for p in found}
        benched = [n for n in names if not any(n in p for p in found)]
        out.append([_orient(a, b, position) for a, b in found])
    return out


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


def fit_rounds(pairs: Iterable[tuple[str, str]], rounds: int) -> list[tuple[str, str]]:
    """The ``pairs``, in their order, that ``schedule_pairs``' first fit places within its first ``rounds`` rounds
    (a pair that would open a later round is left out, and takes no node from the ones after it). So
    ``schedule_pairs`` over what this returns makes at most ``rounds`` rounds, the same ones: an idle sweep
    gets the most of its given order (stalest first) that its hold's rounds can measure."""
    if rounds <= 0:
        return []
    full = (1 << rounds) - 1
    used: dict[str, int] = {}  # node -> bit i set when round i has it
    seen: set[tuple[str, str]] = set()
    kept = []
    for a, b in pairs:
        key = (a, b) if a <= b else (b, a)
        if a == b or key in seen:
            continue
        free = full & ~(used.get(a, 0) | used.get(b, 0))
        if free:
            bit = free & -free  # the first round both are free in, as schedule_pairs' first fit
            used[a] = used.get(a, 0) | bit
            used[b] = used.get(b, 0) | bit
            seen.add(key)
            kept.append((a, b))
    return kept


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


def _members(names: Sequence[str], groups: Mapping[str, str], kind: str) -> dict[str, list[str]]:
    members: dict[str, list[str]] = {}
    for n in names:
        if n not in groups:
            raise PlanError(f"{kind}: {n} has no group")
        members.setdefault(groups[n], []).append(n)
    return members


def grouped_sampled_rounds(
    nodes: Sequence[str], groups: Mapping[str, str], rounds: int, seed: int
) -> list[list[tuple[str, str]]]:
    """``rounds`` rounds drawn from the groups' tree, the same for the same seed: half inside, half across.

    The inside rounds (the first ``ceil(rounds / 2)``) each draw one circle round over every group's shuffled
    members, all groups side by side; the across rounds each draw one circle round over the shuffled groups and
    match the members of each two groups it pairs (the ones left over, from groups of unequal size, are matched
    across any two other groups; with fewer group rounds than across rounds, each comes again with its members
    matched anew), so every group sends across its uplink in each across round (but the one group sitting out
    when their count is odd) and a few nights of sampled sweeps reach every two groups. Every node is in each
    round but for byes; no pair comes twice.
    With fewer than two groups it is ``sampled_rounds``.
    """
    names = list(nodes)
    members = _members(names, groups, "sampled")
    if len(members) < 2:
        return sampled_rounds(names, rounds, seed)
    position = {n: i for i, n in enumerate(names)}
    rng = random.Random(seed)
    shuffled = {g: rng.sample(m, len(m)) for g, m in members.items()}
    labels = sorted(members, key=lambda g: position[members[g][0]])
    rng.shuffle(labels)
    across = rounds // 2
    inside = rounds - across
    seen: set[tuple[str, str]] = set()
    out: list[list[tuple[str, str]]] = []
    picks = {
        g: rng.sample(range(circle_round_count(len(m))), min(inside, circle_round_count(len(m))))
        for g, m in shuffled.items()
        if len(m) > 1
    }
    for k in range(inside):
        out.append([p for g, r in picks.items() if k < len(r) for p in circle_round(shuffled[g], r[k], position)])
    group_rounds = rng.sample(range(circle_round_count(len(labels))), circle_round_count(len(labels)))
    for k in range(across):  # fewer group rounds than across rounds (few groups): each again, matched anew
        r, turn = group_rounds[k % len(group_rounds)], k // len(group_rounds)
        pairs: list[tuple[str, str]] = []
        left: list[tuple[str, str]] = []  # (node, its group) not matched by its group's partner
        for ga, gb in circle_round(labels, r, {g: i for i, g in enumerate(labels)}):
            a, b = shuffled[ga], _rotated(shuffled[gb], turn)
            pairs += [_orient(x, y, position) for x, y in zip(a, b, strict=False)]
            longer, g = (a, ga) if len(a) > len(b) else (b, gb)
            left += [(n, g) for n in longer[min(len(a), len(b)) :]]
        sitting = {g for pair in circle_round(labels, r, {g: i for i, g in enumerate(labels)}) for g in pair}
        left += [(n, g) for g in labels if g not in sitting for n in shuffled[g]]  # the bye group
        while len(left) > 1:
            n, g = left.pop(0)
            other = next((i for i, (_, h) in enumerate(left) if h != g), None)
            if other is None:
                break
            pairs.append(_orient(n, left.pop(other)[0], position))
        out.append(pairs)
    kept: list[list[tuple[str, str]]] = []
    for drawn in out:
        fresh = [p for p in drawn if p not in seen]
        seen.update(fresh)
        if fresh:
            kept.append(fresh)
    return kept


def _rotated(items: list[str], k: int) -> list[str]:
    k %= len(items)
    return items[k:] + items[:k]


def topology_rounds(nodes: Sequence[str], groups: Mapping[str, str]) -> list[list[tuple[str, str]]]:
    """Every pair inside each group, then one pair between every two groups, then each group's uplink round.

    The groups' own rounds run side by side (they share no node), so the inside part takes
    as many rounds as the largest group needs. Between groups i and j the pair is member
    ``j mod |group i|`` with member ``i mod |group j|``: a group of at least G members sends
    a different node to each of the G-1 others, and those pairs then share a round. The
    uplink rounds come last, one a group (``topology_uplinks`` says which).
    """
    return topology_plan(nodes, groups)[0]


def topology_uplinks(nodes: Sequence[str], groups: Mapping[str, str]) -> dict[int, str]:
    """Which rounds of ``topology_rounds`` are uplink rounds: round index (0-based) -> the group sending out."""
    return topology_plan(nodes, groups)[1]


def topology_plan(
    nodes: Sequence[str], groups: Mapping[str, str]
) -> tuple[list[list[tuple[str, str]]], dict[int, str]]:
    """``topology_rounds`` and ``topology_uplinks`` together."""
    names = list(nodes)
    members = _members(names, groups, "topology")
    inside = [circle_rounds(m) for m in members.values()]
    depth = max((len(r) for r in inside), default=0)
    out = [[p for g in inside if k < len(g) for p in g[k]] for k in range(depth)]
    labels = list(members)
    between = []
    for i, gi in enumerate(labels):
        for j in range(i + 1, len(labels)):
            a, b = members[gi], members[labels[j]]
            between.append((a[j % len(a)], b[i % len(b)]))
    out += schedule_pairs(between, names)
    taken = {frozenset(p) for r in out for p in r}
    uplinks: dict[int, str] = {}
    for i, g in enumerate(labels):
        pairs = _uplink_round(members, labels, i, taken, {n: k for k, n in enumerate(names)})
        if pairs:
            uplinks[len(out)] = g
            out.append(pairs)
    return out, uplinks


def _uplink_round(
    members: Mapping[str, list[str]], labels: list[str], i: int, taken: set[frozenset[str]], position: dict[str, int]
) -> list[tuple[str, str]]:
    """Group ``labels[i]``'s uplink round: up to UPLINK_SENDERS of its nodes, each with a node of another group,
    the partners dealt round-robin over the other groups (so no other group's uplink carries more than its share)
    and no pair the sweep already probes. Adds its pairs to ``taken``."""
    others = [labels[(i + d) % len(labels)] for d in range(1, len(labels))]
    queues = [_rotated(members[g], i) for g in others]
    partners = [q[k] for k in range(max((len(q) for q in queues), default=0)) for q in queues if k < len(q)]
    pairs: list[tuple[str, str]] = []
    used: set[str] = set()
    for sender in members[labels[i]]:
        if len(pairs) == UPLINK_SENDERS:
            break
        partner = next((p for p in partners if p not in used and frozenset((sender, p)) not in taken), None)
        if partner is None:
            continue
        used.add(partner)
        taken.add(frozenset((sender, partner)))
        pairs.append(_orient(sender, partner, position))
    return pairs


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

    ``rounds`` and ``seed``: a sampled sweep's; ``groups``: node -> group, a topology sweep's (a sampled
    sweep's too, where the fleet's groups are known: its rounds are then drawn inside and across them).
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
    if kind == "quick" and pairs:  # the pairs to prefer, stalest first (a gang check's)
        return Plan(names, preferred_rounds(names, pairs, QUICK_ROUNDS))
    if kind in ("quick", "bisect"):
        return Plan(names, circle_rounds(names, limit=QUICK_ROUNDS))
    if kind == "sampled":
        count = SAMPLED_ROUNDS if rounds is None else rounds
        if groups is not None:
            return Plan(names, grouped_sampled_rounds(names, groups, count, seed))
        return Plan(names, sampled_rounds(names, count, seed))
    if kind == "topology":
        if groups is None:
            raise PlanError("topology: a topology sweep needs each node's group")
        found, uplinks = topology_plan(names, groups)
        return Plan(names, found, uplinks=uplinks)
    return Plan(names, circle_rounds(names), group=kind in vocabulary.GROUP_SWEEP_KINDS)
