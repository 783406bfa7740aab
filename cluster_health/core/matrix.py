"""The compact matrix payload the heatmaps draw, and the diff of two sweeps. Pure: no Django.

A matrix over N nodes has P = N(N-1)/2 pairs. Each per-pair quantity travels as
one typed array over the upper triangle (row-major, i < j), base64-encoded
little-endian bytes, so 1,024 nodes (523,776 pairs) cost about 5 MB instead of
tens of MB of JSON objects, and the browser decodes them without parsing a
number at a time. Details (stage, reason, hint) travel only for pairs that did
not pass, which is what hover needs.
"""

from __future__ import annotations

import base64
import json
import re
import sys
from array import array
from collections.abc import Iterable
from typing import Any

from cluster_health import vocabulary

# Status codes in the typed arrays; order is what the legend shows.
STATUS_CODES = ("untested", *vocabulary.PAIR_STATUSES)  # appended to only: stored matrices hold these indices
CODE = {name: i for i, name in enumerate(STATUS_CODES)}
BAD_STATUSES = vocabulary.BAD_STATUSES
# A pair's result only moves forward: a late "running" never overwrites a final result.
# The payload carries this list, so the browser applies live updates by the same rule.
OPEN_CODES = ("untested", *vocabulary.OPEN_STATUSES)

# Diff codes for status changes between two sweeps.
DIFF_CODES = ("absent", "same", "broke", "fixed", "changed")
DIFF = {name: i for i, name in enumerate(DIFF_CODES)}

_DIGITS = re.compile(r"(\d+)")

# (a, b, status, busbw_gbps, latency_us, stage, reason, hint); a node name may be None (a node no longer known).
MatrixRow = tuple[str | None, str | None, str, float | None, float | None, str | None, str | None, str | None]


def natural_key(name: str) -> tuple[int | str, ...]:
    """Sort key that puts node2 before node10."""
    return tuple(int(part) if part.isdigit() else part.lower() for part in _DIGITS.split(name))


def natural_sorted(names: Iterable[str]) -> list[str]:
    return sorted(set(names), key=natural_key)


def pair_index(i: int, j: int, n: int) -> int:
    """Index of pair (i, j), i < j, in the row-major upper triangle of an n-node matrix."""
    if i > j:
        i, j = j, i
    return i * (2 * n - i - 1) // 2 + (j - i - 1)


def encode(values: array[Any]) -> str:
    if sys.byteorder != "little":
        values = array(values.typecode, values)
        values.byteswap()
    return base64.b64encode(values.tobytes()).decode("ascii")


def decode(text: str, typecode: str) -> array[Any]:
    values = array(typecode)
    values.frombytes(base64.b64decode(text))
    if sys.byteorder != "little":
        values.byteswap()
    return values


class MatrixArrays:
    """A matrix before encoding: node names in natural order and the typed arrays over the upper triangle."""

    __slots__ = ("nodes", "status", "busbw", "latency", "details")

    def __init__(
        self,
        nodes: list[str],
        status: array[int],
        busbw: array[float],
        latency: array[float],
        details: dict[str, list[str | None]],
    ):
        self.nodes, self.status, self.busbw, self.latency, self.details = nodes, status, busbw, latency, details

    def payload(self) -> dict[str, Any]:
        return {
            "nodes": self.nodes,
            "status_codes": list(STATUS_CODES),
            "open_statuses": list(OPEN_CODES),
            "status": encode(self.status),
            "busbw_gbps": encode(self.busbw),
            "latency_us": encode(self.latency),
            "details": self.details,
        }

    def text(self) -> str:
        """``payload()`` as compact JSON text, the same characters ``json.dumps`` writes.

        The three arrays are base64 (nothing to escape), so they are joined in as they
        are: json.dumps scanned 6 MB of them at 1,024 nodes for a third of a read's time.
        """
        head = json.dumps(
            {"nodes": self.nodes, "status_codes": list(STATUS_CODES), "open_statuses": list(OPEN_CODES)},
            separators=(",", ":"),
        )
        details = json.dumps(self.details, separators=(",", ":"))
        return "".join(
            (
                head[:-1],
                ',"status":"',
                encode(self.status),
                '","busbw_gbps":"',
                encode(self.busbw),
                '","latency_us":"',
                encode(self.latency),
                '","details":',
                details,
                "}",
            )
        )

    def copy(self) -> MatrixArrays:
        """A copy that ``apply`` can change without touching this one (the details' lists are replaced, never changed)."""
        return MatrixArrays(list(self.nodes), self.status[:], self.busbw[:], self.latency[:], dict(self.details))

    @classmethod
    def of_payload(cls, payload: dict[str, Any]) -> MatrixArrays:
        return cls(
            payload["nodes"],
            decode(payload["status"], "B"),
            decode(payload["busbw_gbps"], "f"),
            decode(payload["latency_us"], "f"),
            payload.get("details") or {},
        )

    @classmethod
    def blank(cls, nodes: Iterable[str]) -> MatrixArrays:
        """Every pair of ``nodes`` untested."""
        names = natural_sorted(nodes)
        count = len(names) * (len(names) - 1) // 2
        return cls(
            names, array("B", bytes(count)), array("f", [float("nan")]) * count, array("f", [float("nan")]) * count, {}
        )

    def apply(self, rows: Iterable[MatrixRow]) -> MatrixArrays:
        """Write rows (a, b, status, busbw_gbps, latency_us, stage, reason, hint) into the matrix; returns it.

        Rows naming a node outside the matrix are ignored; a pair given again takes the
        later row unless it would move the pair back from a final result to pending/running.
        """
        n, status, busbw, latency, details = len(self.nodes), self.status, self.busbw, self.latency, self.details
        pos: dict[str | None, int] = {name: i for i, name in enumerate(self.nodes)}  # None (unknown): no position
        nan = float("nan")
        for a, b, st, bw, lat, stage, reason, hint in rows:
            i, j = pos.get(a), pos.get(b)
            if i is None or j is None or i == j:
                continue
            if i > j:
                i, j = j, i
            k = i * (2 * n - i - 1) // 2 + (j - i - 1)  # pair_index, inlined: this loop runs 523,776 times
            if st in OPEN_CODES and STATUS_CODES[status[k]] not in OPEN_CODES:
                continue
            status[k] = CODE[st]
            busbw[k] = nan if bw is None else bw
            latency[k] = nan if lat is None else lat
            if hint or st not in ("ok", "pending", "running"):
                details[str(k)] = [stage, reason, hint]
            elif details:
                details.pop(str(k), None)
        return self

    def restricted(self, names: Iterable[str]) -> MatrixArrays:
        """The matrix over some of its nodes only (a drill-down into one or two groups)."""
        pos = {name: i for i, name in enumerate(self.nodes)}
        out = MatrixArrays.blank(name for name in names if name in pos)
        keep, n = out.nodes, len(self.nodes)
        status, busbw, latency, details = out.status, out.busbw, out.latency, out.details
        k = 0
        for r, a in enumerate(keep):
            i = pos[a]
            for b in keep[r + 1 :]:
                src = pair_index(i, pos[b], n)
                status[k], busbw[k], latency[k] = self.status[src], self.busbw[src], self.latency[src]
                if str(src) in self.details:
                    details[str(k)] = self.details[str(src)]
                k += 1
        return out


def build_matrix_arrays(nodes: Iterable[str], rows: Iterable[MatrixRow]) -> MatrixArrays:
    """The matrix of ``nodes`` from rows (a, b, status, busbw_gbps, latency_us, stage, reason, hint).

    The one matrix builder: pages, the API and the stored matrix of a closed sweep all
    come from here (``.payload()`` or ``.text()`` encodes it). Rows naming a node outside
    ``nodes`` are ignored; for a pair given twice the later one wins unless it would move
    the pair back from a final result to pending/running.
    """
    return MatrixArrays.blank(nodes).apply(rows)


def status_counts(payload: dict[str, Any]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for code in decode(payload["status"], "B"):
        counts[STATUS_CODES[code]] = counts.get(STATUS_CODES[code], 0) + 1
    return counts


def _classify(before: str | None, after: str | None) -> str:
    tested = ("ok", "degraded", "skipped", *BAD_STATUSES)
    if before not in tested or after not in tested:
        return "absent"
    if before == after:
        return "same"
    if after in BAD_STATUSES and before not in BAD_STATUSES:
        return "broke"
    if before in BAD_STATUSES and after not in BAD_STATUSES:
        return "fixed"
    if before == "degraded" and after == "ok":
        return "fixed"  # recovered its speed
    return "changed"


class _DiffSide:
    """One sweep of a diff: its node positions, status codes and bandwidths, looked up by node name."""

    def __init__(self, payload: dict[str, Any]):
        self.nodes: list[str] = payload["nodes"]
        self.pos = {nm: i for i, nm in enumerate(self.nodes)}
        self.status = decode(payload["status"], "B")
        self.busbw = decode(payload["busbw_gbps"], "f")

    def pair(self, a_name: str, b_name: str) -> tuple[str | None, float | None]:
        """The pair's status and busbw in this sweep, or (None, None) if either node was not in it."""
        a, b = self.pos.get(a_name), self.pos.get(b_name)
        if a is None or b is None:
            return None, None
        k = pair_index(a, b, len(self.nodes))
        return STATUS_CODES[self.status[k]], self.busbw[k]


def _slower_pair(a: str, b: str, bw0: float, bw1: float, ratio: float) -> dict[str, Any]:
    """A pair that lost bandwidth between the sweeps, rounded for the report."""
    return {"a": a, "b": b, "before_gbps": round(bw0, 3), "after_gbps": round(bw1, 3), "ratio": round(ratio, 3)}


def build_diff(before: dict[str, Any], after: dict[str, Any], drop_ratio: float = 0.9) -> dict[str, Any]:
    """Compare two matrix payloads: busbw ratio (after/before) and status changes per pair.

    The node axis is the union of both sweeps' nodes. Besides the typed arrays, the
    diff lists the pairs that broke, were fixed (a failure or a slow pair recovered), changed otherwise,
    or lost bandwidth below `drop_ratio`,
    which is what a report of "what changed" needs.
    """
    names = natural_sorted([*before["nodes"], *after["nodes"]])
    n = len(names)
    count = n * (n - 1) // 2
    ratio = array("f", [float("nan")]) * count
    change = array("B", bytes(count))
    old, new = _DiffSide(before), _DiffSide(after)
    # Every cell the change view colours is in one of these lists: nothing on the figure is missing below it.
    moved: dict[str, list[dict[str, Any]]] = {"broke": [], "fixed": [], "changed": []}
    slower: list[dict[str, Any]] = []
    for i in range(n):
        for j in range(i + 1, n):
            k = pair_index(i, j, n)
            (st0, bw0), (st1, bw1) = old.pair(names[i], names[j]), new.pair(names[i], names[j])
            kind = _classify(st0, st1)
            change[k] = DIFF[kind]
            if kind in moved:
                moved[kind].append({"a": names[i], "b": names[j], "before": st0, "after": st1})
            if bw0 is not None and bw1 is not None and bw0 == bw0 and bw1 == bw1 and bw0 > 0:
                ratio[k] = bw1 / bw0
                if ratio[k] < drop_ratio:
                    slower.append(_slower_pair(names[i], names[j], bw0, bw1, ratio[k]))
    slower.sort(key=lambda p: p["ratio"])
    return {
        "nodes": names,
        "diff_codes": list(DIFF_CODES),
        "change": encode(change),
        "busbw_ratio": encode(ratio),
        "broke": moved["broke"],
        "fixed": moved["fixed"],
        "changed": moved["changed"],
        "slower": slower,
        "added_nodes": natural_sorted(set(after["nodes"]) - set(before["nodes"])),
        "removed_nodes": natural_sorted(set(before["nodes"]) - set(after["nodes"])),
    }
