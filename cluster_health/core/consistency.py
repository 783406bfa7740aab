"""Node consistency: the values that make a job hang when they differ across nodes. Pure.

One reading of the agent's facts serves both the consistency table (pages) and
the findings of a sweep: a value is odd when it differs from what most nodes
have; a hostname that resolves only to loopback is odd wherever it appears,
since Gloo then binds loopback and no peer can connect.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from typing import Any

from cluster_health.core.finding_row import finding

# (column shown, key in facts["versions"])
VERSION_COLUMNS = (
    ("torch", "torch"),
    ("NCCL", "nccl"),
    ("CUDA", "cuda"),
    ("driver", "driver"),
    ("python", "python"),
    ("GPUs", "gpu_count"),
)
LOOPBACK_COLUMN = "hostname → loopback"
LAUNCH_PREFIXES = ("MASTER_", "NCCL_", "GLOO_", "TORCH_", "WORLD_SIZE", "CUDA_VISIBLE_DEVICES")
LOOPBACK_PREFIXES = ("127.", "::1", "0:0:0:0:0:0:0:1")
MISSING = "–"
NAMES_IN_SUMMARY = 8  # nodes named per value before "..."


def _section(facts: dict[str, Any], key: str) -> dict[str, Any]:
    """One object of an agent's facts; {} when it is missing or not an object."""
    found = facts.get(key) or {}
    return found if isinstance(found, dict) else {}


def versions(facts: dict[str, Any]) -> dict[str, str]:
    """The node's versions that must agree across a job, by column."""
    found = _section(facts, "versions")
    return {col: str(found[key]) for col, key in VERSION_COLUMNS if found.get(key) not in (None, "")}


def launch_env(facts: dict[str, Any]) -> dict[str, str]:
    """The launch variables the agent saw (MASTER_*, NCCL_*, GLOO_*, TORCH_*, ...)."""
    env = _section(facts, "env")
    return {k: str(v) for k, v in env.items() if isinstance(k, str) and k.startswith(LAUNCH_PREFIXES)}


def hostname(facts: dict[str, Any]) -> tuple[str | None, list[str], bool | None]:
    """The hostname, what it resolves to, and whether that is loopback only (None: unknown)."""
    host = facts.get("host")
    if not isinstance(host, dict):
        return None, [], None
    addrs = [a for a in host.get("resolves_to") or [] if isinstance(a, str)]
    loopback = host.get("loopback")
    if loopback is None and addrs:
        loopback = all(a.startswith(LOOPBACK_PREFIXES) for a in addrs)
    return host.get("hostname"), addrs, loopback


def _row(facts: dict[str, Any], env_keys: list[str]) -> dict[str, str]:
    have = versions(facts)
    row = {col: have.get(col, MISSING) for col, _ in VERSION_COLUMNS}
    loopback = hostname(facts)[2]
    row[LOOPBACK_COLUMN] = "unknown" if loopback is None else ("yes" if loopback else "no")
    env = launch_env(facts)
    row.update({k: env.get(k, MISSING) for k in env_keys})
    return row


def table(facts_by_node: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Columns and rows of the consistency table; each cell says its value and whether it is odd.

    Launch variables each get a column; a variable set on some nodes and not on
    others is shown as "–" where missing.
    """
    env_keys = sorted({k for f in facts_by_node.values() for k in launch_env(f)})
    columns = [c for c, _ in VERSION_COLUMNS] + [LOOPBACK_COLUMN] + env_keys
    values = {node: _row(facts, env_keys) for node, facts in facts_by_node.items()}
    majority = {}
    for col in columns:
        counts = Counter(row[col] for row in values.values())
        majority[col] = counts.most_common(1)[0][0] if counts else None
    rows = []
    odd_count: Counter[str] = Counter()
    for node, row in values.items():
        cells = []
        for col in columns:
            val = row[col]
            odd = val == "yes" if col == LOOPBACK_COLUMN else (val != majority[col] and len(values) > 1)
            odd_count[col] += odd
            cells.append({"column": col, "value": val, "odd": odd})
        rows.append({"node": node, "cells": cells, "odd": any(c["odd"] for c in cells)})
    return {"columns": columns, "rows": rows, "majority": majority, "odd_columns": [c for c in columns if odd_count[c]]}


def _odd_ones_out(values: dict[str, str]) -> tuple[list[str], str]:
    """Nodes whose value is not the most common one, and a readable 'value on nodes' summary."""
    groups: dict[str, list[str]] = defaultdict(list)
    for node, val in sorted(values.items()):
        groups[val].append(node)
    ranked = sorted(groups.items(), key=lambda kv: (-len(kv[1]), kv[0]))
    odd = [n for _, ns in ranked[1:] for n in ns]
    summary = "; ".join(
        f"{val} on {', '.join(ns[:NAMES_IN_SUMMARY])}{' ...' if len(ns) > NAMES_IN_SUMMARY else ''}"
        for val, ns in ranked
    )
    return odd, summary


def findings(facts_by_node: dict[str, dict[str, Any]], addresses: dict[str, str] | None = None) -> list[dict[str, str]]:
    """Warnings for versions and launch variables that differ across nodes, and loopback hostnames.

    A hostname resolving to loopback matters only when peers reach the node at another
    address (``addresses``: the address each node's agent registered).
    """
    addresses = addresses or {}
    out = []
    if len(facts_by_node) >= 2:
        for read, code, missing in (
            (versions, "version_mismatch", "(unknown)"),
            (launch_env, "launch_env_mismatch", "(unset)"),
        ):
            for key in sorted({k for f in facts_by_node.values() for k in read(f)}):
                values = {n: read(f).get(key, missing) for n, f in facts_by_node.items()}
                if len(set(values.values())) > 1:
                    odd, summary = _odd_ones_out(values)
                    out.append(
                        finding(
                            "warn",
                            code,
                            ", ".join(odd[:NAMES_IN_SUMMARY]) or "cluster",
                            f"{key} differs across nodes: {summary}",
                        )
                    )
    for node, facts in sorted(facts_by_node.items()):
        host, addrs, loopback = hostname(facts)
        if str(addresses.get(node, "")).startswith(LOOPBACK_PREFIXES + ("localhost",)):
            continue
        if loopback and addrs:
            out.append(
                finding(
                    "warn",
                    "hostname_loopback",
                    node,
                    f"{node}: hostname {host or ''} resolves to {', '.join(addrs)} (loopback); "
                    "Gloo and NCCL pick that interface unless GLOO_SOCKET_IFNAME / "
                    "NCCL_SOCKET_IFNAME name a real NIC",
                )
            )
    return out
