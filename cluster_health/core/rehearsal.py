"""Launch rehearsal: which ranks of a job would hang at rendezvous, and why. Pure: no Django.

The rehearsal runs the job's own rendezvous (its master node, MASTER_PORT, backend
and interface variables) from every node with bounded timeouts; these functions
turn the ranks' reports and the nodes' facts into findings.
"""

from __future__ import annotations

from typing import Any

from cluster_health.core.finding_row import finding

IFNAME_VARIABLES = ("GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME")


def interface_names(facts: dict[str, Any]) -> list[str] | None:
    """Interface names a node reported, or None if its facts do not say."""
    found = facts.get("interfaces")
    if not isinstance(found, list):
        return None
    names = [i.get("name") if isinstance(i, dict) else str(i) for i in found if i]
    return [n for n in names if n is not None]  # an entry without a name names nothing


def ifname_matches(value: str, names: list[str]) -> bool:
    """Does an *_SOCKET_IFNAME value select at least one interface? (NCCL/Gloo syntax: a,b prefixes,
    '=' exact names, '^' exclusions)."""
    if value.startswith("^"):
        excluded = [v.lstrip("=") for v in value[1:].split(",") if v]
        return any(not any(n.startswith(e) for e in excluded) for n in names)
    for entry in (v for v in value.split(",") if v):
        if entry.startswith("="):
            if entry[1:] in names:
                return True
        elif any(n.startswith(entry) for n in names):
            return True
    return False


def setting_findings(params: dict[str, Any], facts_by_node: dict[str, dict[str, Any]]) -> list[dict[str, str]]:
    """Launch settings that cannot work on some node, found from facts alone."""
    out = []
    env = params.get("env") or {}
    nodes: list[str] = [params["master"]] if params.get("master") else []
    nodes += [n for n in sorted(facts_by_node) if n not in nodes]
    for var in IFNAME_VARIABLES:
        value = env.get(var)
        if not value:
            continue
        for node in nodes:
            names = interface_names(facts_by_node.get(node) or {})
            if names is not None and not ifname_matches(value, names):
                out.append(
                    finding(
                        "fail",
                        "interface_missing",
                        node,
                        f"{node} would hang: {var}={value} names no interface there "
                        f"(it has {', '.join(names) or 'none'})",
                    )
                )
    return out


def rank_findings(
    nodes: list[str], halves: dict[str, dict[str, Any]], status: str, reason: str | None, hint: str | None
) -> list[dict[str, str]]:
    """One finding per rank that would hang or fail, with the stage, reason and hint it reported."""
    out = []
    for rank, node in enumerate(nodes):
        half = halves.get(str(rank))
        if half is None:
            if status in ("ok", "skipped", "pending", "running"):
                continue
            why = reason or "no answer"
            out.append(
                finding(
                    "fail",
                    "rank_silent",
                    node,
                    f"rank {rank} ({node}) would hang: it never reported ({why})" + (f": {hint}" if hint else ""),
                )
            )
        elif half["status"] not in ("ok", "degraded", "skipped"):
            role = "the master" if rank == 0 else f"rank {rank}"
            text = f"{role} ({node}) would hang at {half.get('stage')} ({half.get('reason')})"
            if half.get("hint"):
                text += f": {half['hint']}"
            out.append(finding("fail", half.get("reason") or "rank_failed", node, text))
    return out
