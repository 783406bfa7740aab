"""Ranks in the same collective on different process groups, told apart without the Flight Recorder. Pure.

Each stuck rank may carry ``groups`` (agents/hangs/groups.py): the names its own code gives the group
object its collective runs on (``waits_on``) and the names of the other groups it holds
(``other_groups``). A name one rank waits on that another rank holds as a *different* group is proof
that the two wait on different groups: DeepSpeed's multi-group hang (groups created or entered in
different orders), named with the groups shown.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

MAX_NAMES = 16


def _names(value: Any) -> set[str]:
    if not isinstance(value, list):
        return set()
    return {v for v in value[:MAX_NAMES] if isinstance(v, str) and len(v) <= 64 and (v.isidentifier() or " " in v)}


def split(ranks: Sequence[dict[str, Any]]) -> dict[str, list[int]] | None:
    """{group name: the ranks waiting on it} when at least two ranks provably wait on different groups,
    else None (no names read, or nothing contradicts one group for all)."""
    seen = {}
    for r in ranks:
        g = r.get("groups")
        if isinstance(g, dict) and isinstance(r.get("rank"), int) and (mine := _names(g.get("waits_on"))):
            seen[r["rank"]] = (mine, _names(g.get("other_groups")))
    telling = {n for mine, _ in seen.values() for n in mine} & {n for _, others in seen.values() for n in others}
    if not telling:
        return None
    out: dict[str, list[int]] = {}
    for rank, (mine, _) in sorted(seen.items()):
        label = sorted(mine & telling or mine)[0]
        out.setdefault(label, []).append(rank)
    return out if len(out) > 1 else None


def culprit(per_group: dict[str, list[int]], op: str, ranks: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The ``mismatch`` culprit: which ranks wait on which group (by the job's own names)."""
    text = "; ".join(f"rank(s) {', '.join(map(str, rs[:8]))} on `{g}`" for g, rs in per_group.items())
    waiting = sorted(r for rs in per_group.values() for r in rs)
    return {
        "kind": "mismatch",
        "subject": " vs ".join(f"{op} on `{g}`" for g in per_group),
        "nodes": sorted({str(r.get("node", "?")) for r in ranks if r.get("rank") in waiting}),
        "ranks": waiting,
        "text": f"the ranks wait in {op} on different process groups: {text} (the names the job's code gives "
        "the groups, read from the ranks' stacks)",
        "hint": "ranks must enter the process groups' collectives in the same order (and create the groups in "
        "the same order on every rank)",
        "evidence": {"groups": sorted(per_group), "collectives": per_group, "source": "stack locals"},
    }
