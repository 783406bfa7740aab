"""The group-level matrix: one cell per pair of groups (rack, leaf switch, rail). Pure: no Django.

A 4,096-node sweep's node matrix has 8,386,560 cells, about 100 MB of payload and
more than a screen has pixels. Grouped into 64 racks it has 2,080 cells, each
summing up the pairs with one node in each of its two groups (on the diagonal,
the pairs inside one group):

- ``pairs``: how many such pairs there are; ``tested``: how many this sweep probed
  (has any status for); ``bad``: how many did not work (failed, timeout, offline);
- ``worst``: the worst status among them (WORST_ORDER), as a code of
  ``matrix.STATUS_CODES``, so the browser colours it as it colours a node cell;
- ``busbw_median`` and ``busbw_min`` over the pairs that measured a bandwidth
  (NaN where none did).

Cells travel as typed arrays over the upper triangle with its diagonal (g <= h,
row-major), encoded as the node matrix's are. Built from the node matrix's arrays
(matrix.MatrixArrays), so both views of a sweep always agree; only the pairs with
a status are visited, so a sampled or topology sweep over 4,096 nodes costs its
probed pairs, not the 8 million it did not probe.
"""

from __future__ import annotations

import math
import re
from array import array
from collections.abc import Mapping
from typing import Any

from cluster_health.core import matrix

# Worst last. A block still pending or running shows that until it is done, unless a
# result already in it is worse; "untested" only where nothing of the block was probed.
WORST_ORDER = (
    "untested",
    "ok",
    "transient",
    "skipped",
    "pending",
    "running",
    "contended",
    "degraded",
    "timeout",
    "failed",
    "offline",
)
_RANK = {matrix.CODE[name]: rank for rank, name in enumerate(WORST_ORDER)}
_BY_RANK = [matrix.CODE[name] for name in WORST_ORDER]
_BAD_CODES = frozenset(matrix.CODE[name] for name in matrix.BAD_STATUSES)
_TESTED = re.compile(rb"[^\x00]")  # code 0 is "untested"
assert matrix.CODE["untested"] == 0 and set(_RANK) == set(range(len(matrix.STATUS_CODES)))


MAX_GROUPS = 512  # past this a group matrix is no summary: 131,328 cells


class TooManyGroups(ValueError):
    """The grouping has more groups than a summary can show; the message says what to do."""


def cell_index(g: int, h: int, groups: int) -> int:
    """Index of cell (g, h), g <= h, in the row-major upper triangle with its diagonal of a G-group matrix."""
    if g > h:
        g, h = h, g
    return g * (2 * groups - g + 1) // 2 + (h - g)


def _counts(array_type: str, count: int) -> array[Any]:
    values = array(array_type, bytes(4 * count))
    assert values.itemsize == 4 and len(values) == count
    return values


def build(arrays: matrix.MatrixArrays, group_of: Mapping[str, str]) -> dict[str, Any]:
    """The group matrix payload of a node matrix; ``group_of`` maps each node to its group.

    A node ``group_of`` does not name is a group of its own (named after the node),
    so no pair is ever left out of the sums.
    """
    nodes = arrays.nodes
    n = len(nodes)
    names = matrix.natural_sorted(group_of.get(node) or node for node in nodes)
    gpos = {name: g for g, name in enumerate(names)}
    of_node = [gpos[group_of.get(node) or node] for node in nodes]
    big_g = len(names)
    if big_g > MAX_GROUPS:
        raise TooManyGroups(
            f"{n} nodes fall into {big_g} groups, more than the {MAX_GROUPS} a group matrix shows: declare "
            "each node's topology group (admin, API or manage.py topology) or set CLUSTER_HEALTH_GROUP_PATTERN"
        )
    sizes = [0] * big_g
    for g in of_node:
        sizes[g] += 1
    cells = big_g * (big_g + 1) // 2
    pairs, tested, bad = _counts("I", cells), _counts("I", cells), _counts("I", cells)
    worst = array("B", bytes(cells))
    for g in range(big_g):
        for h in range(g, big_g):
            pairs[cell_index(g, h, big_g)] = sizes[g] * (sizes[g] - 1) // 2 if g == h else sizes[g] * sizes[h]
    bandwidths: dict[int, list[float]] = {}
    status, busbw = arrays.status, arrays.busbw
    raw = status.tobytes()
    rank = [_RANK[code] for code in range(len(matrix.STATUS_CODES))]
    is_bad = [code in _BAD_CODES for code in range(len(matrix.STATUS_CODES))]
    cells_of = [[cell_index(g, h, big_g) for h in range(big_g)] for g in range(big_g)]  # a row's cells by group
    for i in range(n - 1):
        base = i * (2 * n - i - 1) // 2 - i - 1  # + j: pair (i, j)'s index
        start, end = base + i + 1, base + n
        if raw.count(0, start, end) == end - start:
            continue  # nothing of this row probed
        row_cells = cells_of[of_node[i]]
        for found in _TESTED.finditer(raw, start, end):
            k = found.start()
            c = row_cells[of_node[k - base]]
            code = raw[k]
            tested[c] += 1
            if is_bad[code]:
                bad[c] += 1
            if rank[code] > rank[worst[c]]:
                worst[c] = code
            bw = busbw[k]
            if bw == bw:  # not NaN
                if c in bandwidths:
                    bandwidths[c].append(bw)
                else:
                    bandwidths[c] = [bw]
    median, lowest = array("f", [math.nan]) * cells, array("f", [math.nan]) * cells
    for c, values in bandwidths.items():
        values.sort()
        half = len(values) // 2
        median[c] = values[half] if len(values) % 2 else (values[half - 1] + values[half]) / 2
        lowest[c] = values[0]
    return {
        "groups": names,
        "sizes": sizes,
        "nodes": n,
        "status_codes": list(matrix.STATUS_CODES),
        "worst_order": list(WORST_ORDER),
        "pairs": matrix.encode(pairs),
        "tested": matrix.encode(tested),
        "bad": matrix.encode(bad),
        "worst": matrix.encode(worst),
        "busbw_median": matrix.encode(median),
        "busbw_min": matrix.encode(lowest),
    }


def members(group_of: Mapping[str, str], nodes: list[str], wanted: list[str]) -> list[str]:
    """The nodes of the wanted groups (a node without a group is its own)."""
    chosen = set(wanted)
    return [node for node in nodes if (group_of.get(node) or node) in chosen]
