"""Sweep planning: which pairs run in which round. Pure: no Django, no I/O.

All-pairs work uses the circle method: with N nodes (N even) there are N-1 rounds
of N/2 disjoint pairs, so every pair meets exactly once and no node is in two
probes at the same time. Odd N gets a bye: one node sits out each round.
Pairs are oriented so that ``a`` comes before ``b`` in the node order; ``a`` is
rank 0 of the probe and hosts the store.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from agents import contract


class PlanError(ValueError):
    """The request cannot be planned; the text says why."""


@dataclass
class Plan:
    """Rounds of disjoint pairs, plus whether a group collective follows them."""

    nodes: list[str]
    rounds: list[list[tuple[str, str]]] = field(default_factory=list)
    group: bool = False

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
    ring: list[str | None] = names + ([None] if len(names) % 2 else [])
    m = len(ring)
    half = m // 2
    total = m - 1 if limit is None else min(limit, m - 1)
    rounds = []
    # Position 0 stays fixed; the others rotate one step per round.
    fixed, rest = ring[0], ring[1:]
    for r in range(total):
        rot = rest[-r:] + rest[:-r] if r else rest
        order = [fixed] + rot
        pairs = []
        for i in range(half):
            a, b = order[i], order[m - 1 - i]
            if a is not None and b is not None:
                pairs.append(_orient(a, b, position))
        rounds.append(pairs)
    return rounds


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


def plan(kind: str, nodes: Sequence[str], pairs: Iterable[tuple[str, str]] | None = None) -> Plan:
    """The probes of one sweep of ``kind`` over ``nodes`` (in matrix order)."""
    if kind not in contract.SWEEP_KINDS:
        raise PlanError(f"kind: {kind!r} is not one of {', '.join(contract.SWEEP_KINDS)}")
    names = list(nodes)
    if len(set(names)) != len(names):
        raise PlanError("nodes: a node is listed twice")
    if kind == "pairs":
        if not pairs:
            raise PlanError("pairs: a 'pairs' sweep needs at least one pair")
        return Plan(names, schedule_pairs(pairs, names))
    if len(names) < 2:
        raise PlanError(f"nodes: a {kind} sweep needs at least 2 nodes, {len(names)} available")
    if kind in ("group", "preflight"):
        return Plan(names, [], group=True)
    if kind == "quick":
        # Two circle rounds put every node in at least one pair, also the round-one bye of odd N.
        return Plan(names, circle_rounds(names, limit=2))
    return Plan(names, circle_rounds(names), group=kind in contract.GROUP_SWEEP_KINDS)
