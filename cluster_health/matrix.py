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
import re
import sys
from array import array
from collections.abc import Iterable

from agents import contract

# Status codes in the typed arrays; order is what the legend shows.
STATUS_CODES = ("untested", "pending", "running", *contract.STATUSES)
CODE = {name: i for i, name in enumerate(STATUS_CODES)}
BAD_STATUSES = ("failed", "timeout", "offline")
# A pair's result only moves forward: a late "running" never overwrites a final result.
_PROGRESS = {"untested": 0, "pending": 1, "running": 2}

# Diff codes for status changes between two sweeps.
DIFF_CODES = ("absent", "same", "broke", "fixed", "changed")
DIFF = {name: i for i, name in enumerate(DIFF_CODES)}

_DIGITS = re.compile(r"(\d+)")


def natural_key(name: str) -> tuple:
    """Sort key that puts node2 before node10."""
    return tuple(int(part) if part.isdigit() else part.lower() for part in _DIGITS.split(name))


def natural_sorted(names: Iterable[str]) -> list[str]:
    return sorted(set(names), key=natural_key)


def pair_index(i: int, j: int, n: int) -> int:
    """Index of pair (i, j), i < j, in the row-major upper triangle of an n-node matrix."""
    if i > j:
        i, j = j, i
    return i * (2 * n - i - 1) // 2 + (j - i - 1)


def encode(values: array) -> str:
    if sys.byteorder != "little":
        values = array(values.typecode, values)
        values.byteswap()
    return base64.b64encode(values.tobytes()).decode("ascii")


def decode(text: str, typecode: str) -> array:
    values = array(typecode)
    values.frombytes(base64.b64decode(text))
    if sys.byteorder != "little":
        values.byteswap()
    return values


def build_matrix(nodes: Iterable[str], pairs: Iterable[dict]) -> dict:
    """The matrix payload for a set of nodes and pair results given as dicts.

    `pairs` are dicts with at least a, b, status; optional stage, reason, hint,
    busbw_gbps, latency_us. See build_matrix_rows for the rules.
    """
    return build_matrix_rows(nodes, ((p["a"], p["b"], p["status"], p.get("busbw_gbps"), p.get("latency_us"),
                                      p.get("stage"), p.get("reason"), p.get("hint")) for p in pairs))


def build_matrix_rows(nodes: Iterable[str], rows: Iterable[tuple]) -> dict:
    """The matrix payload from rows (a, b, status, busbw_gbps, latency_us, stage, reason, hint).

    The one matrix builder: pages, the API and the stored matrix of a closed sweep
    all come from here. Rows naming a node outside `nodes` are ignored; for a pair
    given twice the later one wins unless it would move the pair back from a final
    result to pending/running.
    """
    names = natural_sorted(nodes)
    n = len(names)
    pos = {name: i for i, name in enumerate(names)}
    count = n * (n - 1) // 2
    status = array("B", bytes(count))
    busbw = array("f", [float("nan")]) * count
    latency = array("f", [float("nan")]) * count
    details: dict[str, list] = {}
    nan = float("nan")
    for a, b, st, bw, lat, stage, reason, hint in rows:
        i, j = pos.get(a), pos.get(b)
        if i is None or j is None or i == j:
            continue
        if i > j:
            i, j = j, i
        k = i * (2 * n - i - 1) // 2 + (j - i - 1)  # pair_index, inlined: this loop runs 523,776 times
        if st in _PROGRESS and STATUS_CODES[status[k]] not in _PROGRESS:
            continue
        status[k] = CODE[st]
        busbw[k] = nan if bw is None else bw
        latency[k] = nan if lat is None else lat
        if hint or st not in ("ok", "pending", "running"):
            details[str(k)] = [stage, reason, hint]
        elif details:
            details.pop(str(k), None)
    return {
        "nodes": names,
        "status_codes": list(STATUS_CODES),
        "status": encode(status),
        "busbw_gbps": encode(busbw),
        "latency_us": encode(latency),
        "details": details,
    }


def status_counts(payload: dict) -> dict[str, int]:
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
    return "changed"


def build_diff(before: dict, after: dict, drop_ratio: float = 0.9) -> dict:
    """Compare two matrix payloads: busbw ratio (after/before) and status changes per pair.

    The node axis is the union of both sweeps' nodes. Besides the typed arrays, the
    diff lists the pairs that broke, were fixed, or lost bandwidth below `drop_ratio`,
    which is what a report of "what changed" needs.
    """
    names = natural_sorted([*before["nodes"], *after["nodes"]])
    n = len(names)
    count = n * (n - 1) // 2
    ratio = array("f", [float("nan")]) * count
    change = array("B", bytes(count))
    sides = []
    for payload in (before, after):
        sides.append((payload["nodes"], {nm: i for i, nm in enumerate(payload["nodes"])},
                      decode(payload["status"], "B"), decode(payload["busbw_gbps"], "f")))
    broke, fixed, slower = [], [], []
    for i in range(n):
        for j in range(i + 1, n):
            k = pair_index(i, j, n)
            values = []
            for side_nodes, side_pos, side_status, side_busbw in sides:
                a, b = side_pos.get(names[i]), side_pos.get(names[j])
                if a is None or b is None:
                    values.append((None, None))
                    continue
                sk = pair_index(a, b, len(side_nodes))
                values.append((STATUS_CODES[side_status[sk]], side_busbw[sk]))
            (st0, bw0), (st1, bw1) = values
            kind = _classify(st0, st1)
            change[k] = DIFF[kind]
            pair = (names[i], names[j])
            if kind == "broke":
                broke.append({"a": pair[0], "b": pair[1], "before": st0, "after": st1})
            elif kind == "fixed":
                fixed.append({"a": pair[0], "b": pair[1], "before": st0, "after": st1})
            if bw0 is not None and bw1 is not None and bw0 == bw0 and bw1 == bw1 and bw0 > 0:
                ratio[k] = bw1 / bw0
                if ratio[k] < drop_ratio:
                    slower.append({"a": pair[0], "b": pair[1], "before_gbps": round(bw0, 3),
                                   "after_gbps": round(bw1, 3), "ratio": round(ratio[k], 3)})
    slower.sort(key=lambda p: p["ratio"])
    return {
        "nodes": names,
        "diff_codes": list(DIFF_CODES),
        "change": encode(change),
        "busbw_ratio": encode(ratio),
        "broke": broke,
        "fixed": fixed,
        "slower": slower,
        "added_nodes": natural_sorted(set(after["nodes"]) - set(before["nodes"])),
        "removed_nodes": natural_sorted(set(before["nodes"]) - set(after["nodes"])),
    }

