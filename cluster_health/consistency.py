"""The consistency table across nodes: the values that make a job hang when they differ. Pure.

A value is odd when it differs from what most nodes have; a hostname that
resolves only to loopback is odd wherever it appears, since Gloo then binds
loopback and no peer can connect.
"""

from __future__ import annotations

from collections import Counter

# (column, path in the agent's facts)
VERSION_COLUMNS = (
    ("torch", ("versions", "torch")),
    ("NCCL", ("versions", "nccl")),
    ("CUDA", ("versions", "cuda")),
    ("driver", ("versions", "driver")),
    ("python", ("versions", "python")),
    ("GPUs", ("versions", "gpu_count")),
)
LOOPBACK_COLUMN = "hostname → loopback"


def _get(facts: dict, path: tuple):
    val = facts
    for key in path:
        if not isinstance(val, dict):
            return None
        val = val.get(key)
    return val


def _shown(val) -> str:
    return "–" if val is None or val == "" else str(val)


def table(facts_by_node: dict[str, dict]) -> dict:
    """Columns and rows of the consistency table; each cell says its value and whether it is odd.

    Launch variables (facts["env"]: MASTER_*, NCCL_*, GLOO_*, ...) each get a column;
    a variable set on some nodes and not on others is shown as "–" where missing.
    """
    env_keys = sorted({k for f in facts_by_node.values() for k in (f.get("env") or {})})
    columns = [c for c, _ in VERSION_COLUMNS] + [LOOPBACK_COLUMN] + env_keys
    values: dict[str, dict[str, str]] = {}
    for node, facts in facts_by_node.items():
        row = {c: _shown(_get(facts, path)) for c, path in VERSION_COLUMNS}
        loopback = _get(facts, ("host", "loopback"))
        row[LOOPBACK_COLUMN] = "unknown" if loopback is None else ("yes" if loopback else "no")
        env = facts.get("env") or {}
        row.update({k: _shown(env.get(k)) for k in env_keys})
        values[node] = row
    majority = {}
    for col in columns:
        counts = Counter(row[col] for row in values.values())
        majority[col] = counts.most_common(1)[0][0] if counts else None
    rows = []
    odd_count = Counter()
    for node, row in values.items():
        cells = []
        for col in columns:
            val = row[col]
            odd = val != majority[col] and len(values) > 1
            if col == LOOPBACK_COLUMN:
                odd = val == "yes"
            odd_count[col] += odd
            cells.append({"column": col, "value": val, "odd": odd})
        rows.append({"node": node, "cells": cells, "odd": any(c["odd"] for c in cells)})
    return {"columns": columns, "rows": rows, "majority": majority, "odd_columns": [c for c in columns if odd_count[c]]}
