"""A sweep's verdict and findings from its pair results and node facts. Pure: no Django.

Findings name the culprit: a node whose every pair failed (or whose agent went
silent) is blamed as the node, not as its N-1 links; a pair that failed alone
blames that link. Differences in versions or launch variables across nodes are
warnings, since they hang jobs silently even when every probe passes.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from typing import Iterable

BAD = ("failed", "timeout", "offline")
MEASURED = ("ok", "degraded", *BAD)
MAX_LINK_FINDINGS = 50
VERSION_KEYS = ("torch", "nccl", "cuda", "driver", "python", "gloo")
LAUNCH_PREFIXES = ("MASTER_", "NCCL_", "GLOO_", "TORCH_", "WORLD_SIZE", "CUDA_VISIBLE_DEVICES")
LOOPBACK_PREFIXES = ("127.", "::1", "0:0:0:0:0:0:0:1")


def finding(severity: str, code: str, subject: str, text: str) -> dict:
    return {"severity": severity, "code": code, "subject": subject, "text": text}


def _link(p: dict) -> str:
    return f"{p['a']}<->{p['b']}"


def _describe(p: dict) -> str:
    where = f" at {p['stage']}" if p.get("stage") else ""
    why = f" ({p['reason']})" if p.get("reason") else ""
    hint = f": {p['hint']}" if p.get("hint") else ""
    return f"{p['status']}{where}{why}{hint}"


def culprit_findings(nodes: Iterable[str], pairs: list[dict], offline_nodes: Iterable[str] = ()) -> list[dict]:
    """Fail findings for bad pairs, grouped by the node to blame where one explains them."""
    offline_nodes = set(offline_nodes)
    by_node: dict[str, list[dict]] = defaultdict(list)
    for p in pairs:
        by_node[p["a"]].append(p)
        by_node[p["b"]].append(p)
    bad_pairs = [p for p in pairs if p["status"] in BAD]
    if not bad_pairs:
        return []
    everything_bad = len(bad_pairs) == len(pairs)
    out, blamed = [], set()
    for node in nodes:
        mine = by_node.get(node, [])
        mine_bad = [p for p in mine if p["status"] in BAD]
        if not mine_bad:
            continue
        if node in offline_nodes and any(p["status"] == "offline" for p in mine_bad):
            blamed.add(node)
            out.append(finding("fail", "node_offline", node,
                               f"{node} went offline: its agent stopped sending heartbeats; "
                               f"{len(mine_bad)} of its {len(mine)} pairs could not be probed"))
        elif len(mine) >= 2 and len(mine_bad) == len(mine) and not everything_bad:
            blamed.add(node)
            reason, n = Counter(p.get("reason") or p["status"] for p in mine_bad).most_common(1)[0]
            sample = next(p for p in mine_bad if (p.get("reason") or p["status"]) == reason)
            out.append(finding("fail", "node_unreachable", node,
                               f"every pair with {node} failed ({n} of {len(mine)}: {reason}); blame the node, "
                               f"not its links. Example {_link(sample)}: {_describe(sample)}"))
    links = [p for p in bad_pairs if p["a"] not in blamed and p["b"] not in blamed]
    if everything_bad and len(pairs) >= 2 and not blamed:
        reason, n = Counter(p.get("reason") or p["status"] for p in bad_pairs).most_common(1)[0]
        out.append(finding("fail", "all_pairs_failed", "cluster",
                           f"every one of {len(pairs)} pairs failed (most often: {reason}); suspect the probe "
                           f"settings, the backend or the network as a whole. Example {_link(links[0])}: "
                           f"{_describe(links[0])}"))
        return out
    for p in links[:MAX_LINK_FINDINGS]:
        out.append(finding("fail", "link_failed", _link(p), f"{_link(p)} {_describe(p)}"))
    if len(links) > MAX_LINK_FINDINGS:
        out.append(finding("fail", "link_failed", "links",
                           f"and {len(links) - MAX_LINK_FINDINGS} more failing links (see the matrix)"))
    return out


def degraded_findings(pairs: list[dict]) -> list[dict]:
    slow = [p for p in pairs if p["status"] == "degraded"]
    out = [finding("warn", "below_baseline", _link(p), f"{_link(p)} {_describe(p)}")
           for p in slow[:MAX_LINK_FINDINGS]]
    if len(slow) > MAX_LINK_FINDINGS:
        out.append(finding("warn", "below_baseline", "links",
                           f"and {len(slow) - MAX_LINK_FINDINGS} more links below baseline"))
    return out


def _versions(facts: dict) -> dict:
    found = dict(facts.get("versions") or {})
    for key in VERSION_KEYS:
        if key not in found and isinstance(facts.get(key), (str, int, float)):
            found[key] = facts[key]
    return {k: str(v) for k, v in found.items() if k in VERSION_KEYS and v not in (None, "")}


def _launch_env(facts: dict) -> dict:
    env = facts.get("env") or {}
    return {k: str(v) for k, v in env.items() if isinstance(k, str) and k.startswith(LAUNCH_PREFIXES)}


def _hostname_addresses(facts: dict) -> tuple[str | None, list[str]]:
    host = facts.get("host") or facts.get("hostname")
    if isinstance(host, dict):
        if "hostname" in host:
            return host.get("hostname"), [a for a in host.get("resolves_to") or [] if isinstance(a, str)]
        return host.get("name"), list(host.get("addresses") or host.get("resolves_to") or [])
    addrs = facts.get("hostname_addresses") or facts.get("hostname_resolves_to") or []
    return host, [a for a in addrs if isinstance(a, str)]


def _odd_ones_out(values: dict[str, str]) -> tuple[list[str], str]:
    """Nodes whose value is not the most common one, and a readable 'value on nodes' summary."""
    groups: dict[str, list[str]] = defaultdict(list)
    for node, val in sorted(values.items()):
        groups[val].append(node)
    ranked = sorted(groups.items(), key=lambda kv: (-len(kv[1]), kv[0]))
    odd = [n for _, ns in ranked[1:] for n in ns]
    summary = "; ".join(f"{val} on {', '.join(ns[:8])}{' ...' if len(ns) > 8 else ''}" for val, ns in ranked)
    return odd, summary


def consistency_findings(facts_by_node: dict[str, dict], addresses: dict[str, str] | None = None) -> list[dict]:
    """Warnings for versions and launch variables that differ across nodes, and loopback hostnames.

    A hostname resolving to loopback matters only when peers reach the node at another
    address (``addresses``: the address each node's agent registered).
    """
    addresses = addresses or {}
    out = []
    if len(facts_by_node) >= 2:
        for read, code, missing in ((_versions, "version_mismatch", "(unknown)"),
                                    (_launch_env, "launch_env_mismatch", "(unset)")):
            for key in sorted({k for f in facts_by_node.values() for k in read(f)}):
                values = {n: read(f).get(key, missing) for n, f in facts_by_node.items()}
                if len(set(values.values())) > 1:
                    odd, summary = _odd_ones_out(values)
                    out.append(finding("warn", code, ", ".join(odd[:8]) or "cluster",
                                       f"{key} differs across nodes: {summary}"))
    for node, facts in sorted(facts_by_node.items()):
        host, addrs = _hostname_addresses(facts)
        if str(addresses.get(node, "")).startswith(LOOPBACK_PREFIXES + ("localhost",)):
            continue
        if addrs and all(a.startswith(LOOPBACK_PREFIXES) for a in addrs):
            out.append(finding("warn", "hostname_loopback", node,
                               f"{node}: hostname {host or ''} resolves to {', '.join(addrs)} (loopback); "
                               "Gloo and NCCL pick that interface unless GLOO_SOCKET_IFNAME / "
                               "NCCL_SOCKET_IFNAME name a real NIC"))
    return out


def group_findings(group: dict | None) -> list[dict]:
    if not group or group.get("status") in (None, "ok", "skipped"):
        return []
    severity = "warn" if group["status"] == "degraded" else "fail"
    n = len(group.get("nodes") or [])
    return [finding(severity, "group_collective", "cluster",
                    f"all_reduce over all {n} nodes {_describe(group)}")]


def verdict(statuses: Iterable[str], findings: Iterable[dict]) -> str:
    """pass, warn, fail or unknown (nothing measured)."""
    counts = Counter(statuses)
    severities = {f["severity"] for f in findings}
    if any(counts[s] for s in BAD) or "fail" in severities:
        return "fail"
    if not any(counts[s] for s in MEASURED):
        return "unknown"
    if counts["degraded"] or "warn" in severities:
        return "warn"
    return "pass"
