"""Two sweeps compared, for the Compare page, its JSON and the report: core.matrix.build_diff, with
every pair it leaves as "changed otherwise" or "absent" that has a word of its own given it.

- ``regressed``: it still works, but is now judged slow (ok -> degraded): a regression, not a mere change.
- ``transient``: it came back ``transient`` or ``contended`` (bad once and fine when probed again, or
  slow beside other traffic): core counts neither as tested and drew the cell "absent", listed nowhere.
  A pair that was transient before is judged as the working pair it was on its second look.

The two codes are appended to core's DIFF_CODES, so the codes core wrote keep their meaning.
"""

from __future__ import annotations

from typing import Any

from cluster_health import vocabulary
from cluster_health.core import matrix

SECOND_LOOK = vocabulary.CONFIRMATION_STATUSES  # transient, contended: what the confirmation pass says
WORKED = ("ok", "skipped", *SECOND_LOOK)
EXTRA_CODES = ("regressed", "transient")


def diff(before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
    """The diff of two matrix payloads (build_diff's keys), plus the ``regressed`` and ``transient`` lists."""
    out = matrix.build_diff(before, after)
    codes = [*out["diff_codes"], *EXTRA_CODES]
    change = matrix.decode(out["change"], "B")
    recheck = {codes.index("absent"), codes.index("changed")}
    old, new = _Statuses(before), _Statuses(after)
    names, k = out["nodes"], 0
    # Rebuilt: core's "changed" list held the regressions; a pair that broke after a transient look is added.
    lists: dict[str, list[dict[str, Any]]] = {"changed": [], "regressed": [], "transient": [], "broke": []}
    for i, a in enumerate(names):
        for b in names[i + 1 :]:
            if change[k] in recheck:
                st0, st1 = old.of(a, b), new.of(a, b)
                kind = classify(st0, st1) or codes[change[k]]
                change[k] = codes.index(kind)
                if kind in lists:
                    lists[kind].append({"a": a, "b": b, "before": st0, "after": st1})
            k += 1
    lists["broke"] = out["broke"] + lists["broke"]
    out.update(lists, diff_codes=codes, change=matrix.encode(change))
    return out


def classify(before: str | None, after: str | None) -> str | None:
    """The word for a pair core left "changed otherwise" or "absent", or None to keep core's."""
    if before is None or after is None:
        return None
    if after in SECOND_LOOK:
        return "same" if before == after else "transient"
    if after == "degraded" and before in WORKED:
        return "regressed"
    if before in SECOND_LOOK:
        if after in vocabulary.BAD_STATUSES:
            return "broke"
        return "changed" if after in WORKED else None
    return None


class _Statuses:
    """One sweep's pair statuses, looked up by node names."""

    def __init__(self, payload: dict[str, Any]):
        self.pos = {name: i for i, name in enumerate(payload["nodes"])}
        self.n = len(payload["nodes"])
        self.status = matrix.decode(payload["status"], "B")

    def of(self, a: str, b: str) -> str | None:
        i, j = self.pos.get(a), self.pos.get(b)
        if i is None or j is None:
            return None
        return matrix.STATUS_CODES[self.status[matrix.pair_index(i, j, self.n)]]
