"""Launch rehearsal: which ranks of a job would hang at rendezvous, and why. Pure: no Django.

The rehearsal runs the job's own rendezvous (its master node, MASTER_PORT, backend
and interface variables) from every node with bounded timeouts; these functions
turn the ranks' reports and the nodes' facts into findings.
"""

from __future__ import annotations

from cluster_health.verdicts import finding

IFNAME_VARIABLES = ("GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME")


def interface_names(facts: dict) -> list[str] | None:
    """Interface names a node reported, or None if its facts do not say."""
    found = facts.get("interfaces")
    if not isinstance(found, list):
        return None
    return [i.get("name") if isinstance(i, dict) else str(i) for i in found if i]


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


def setting_findings(params: dict, facts_by_node: dict[str, dict]) -> list[dict]:
    """Launch settings that cannot work on some node, found from facts alone."""
    out = []
    env = params.get("env") or {}
    nodes = [params.get("master")] if params.get("master") else []
    nodes += [n for n in sorted(facts_by_node) if n not in nodes]
    for var in IFNAME_VARIABLES:
        value = env.get(var)
        if not value:
            continue
        for rank, node in enumerate(nodes):
            names = interface_names(facts_by_node.get(node) or {})
            if names is not None and not ifname_matches(value, names):
                out.append(finding("fail", "interface_missing", node,
                                   f"{node} would hang: {var}={value} names no interface there "
                                   f"(it has {', '.join(names) or 'none'})"))
    return out


def rank_findings(nodes: list[str], halves: dict, status: str, reason: str | None, hint: str | None) -> list[dict]:
    """One finding per rank that would hang or fail, with the stage, reason and hint it reported."""
    out = []
    for rank, node in enumerate(nodes):
        half = halves.get(str(rank))
        if half is None:
            if status in ("ok", "skipped", "pending", "running"):
                continue
            why = reason or "no answer"
            out.append(finding("fail", "rank_silent", node,
                               f"rank {rank} ({node}) would hang: it never reported ({why})"
                               + (f": {hint}" if hint else "")))
        elif half["status"] not in ("ok", "degraded", "skipped"):
            role = "the master" if rank == 0 else f"rank {rank}"
            text = f"{role} ({node}) would hang at {half.get('stage')} ({half.get('reason')})"
            if half.get("hint"):
                text += f": {half['hint']}"
            out.append(finding("fail", half.get("reason") or "rank_failed", node, text))
    return out
