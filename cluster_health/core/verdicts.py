"""A sweep's verdict and findings from its pair results and node facts. Pure: no Django.

Findings name the culprit: a node whose every pair failed (or whose agent went
silent) is blamed as the node, not as its N-1 links; a pair that failed alone
blames that link. A node already offline when the sweep was planned is blamed
whatever its probes were (a group sweep has no pairs to blame it through). Differences in versions or launch variables across nodes are
warnings, since they hang jobs silently even when every probe passes.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any

from cluster_health import vocabulary
from cluster_health.core.culprits import pairs_by_node
from cluster_health.core.finding_row import finding

BAD = vocabulary.BAD_STATUSES
MEASURED = ("ok", "degraded", *vocabulary.CONFIRMATION_STATUSES, *BAD)
MAX_LINK_FINDINGS = 50


def _link(p: dict[str, Any]) -> str:
    return f"{p['a']}<->{p['b']}"


def _describe(p: dict[str, Any]) -> str:
    where = f" at {p['stage']}" if p.get("stage") else ""
    why = f" ({p['reason']})" if p.get("reason") else ""
    hint = f": {p['hint']}" if p.get("hint") else ""
    return f"{p['status']}{where}{why}{hint}"


def _absent_node(node: str, silence: str, mine: list[dict[str, Any]], mine_bad: list[dict[str, Any]]) -> dict[str, Any]:
    """Fail finding for a node that was already offline when the sweep was planned."""
    probed = f"; {len(mine_bad)} of its {len(mine)} pairs could not be probed" if mine else ""
    text = (
        f"{node} is offline, {silence}: it is in the fleet but its agent sends no "
        f"heartbeats{probed}. Start its agent, or retire the node if it is gone"
    )
    return finding("fail", "node_offline", node, text)


def _node_culprit(
    node: str,
    mine: list[dict[str, Any]],
    mine_bad: list[dict[str, Any]],
    went_offline: bool,
    everything_bad: bool,
) -> dict[str, Any] | None:
    """Fail finding blaming a node for its bad pairs, or None when its links are to blame."""
    if not mine_bad:
        return None
    if went_offline and any(p["status"] == "offline" for p in mine_bad):
        lost = f"{len(mine_bad)} of its {len(mine)} pairs could not be probed"
        return finding(
            "fail", "node_offline", node, f"{node} went offline: its agent stopped sending heartbeats; {lost}"
        )
    if len(mine) >= 2 and len(mine_bad) == len(mine) and not everything_bad:
        reason, n = Counter(p.get("reason") or p["status"] for p in mine_bad).most_common(1)[0]
        sample = next(p for p in mine_bad if (p.get("reason") or p["status"]) == reason)
        return finding(
            "fail",
            "node_unreachable",
            node,
            f"every pair with {node} failed ({n} of {len(mine)}: {reason}); blame the node, "
            f"not its links. Example {_link(sample)}: {_describe(sample)}",
        )
    return None


def _all_pairs_failed(pairs: list[dict[str, Any]], bad_pairs: list[dict[str, Any]]) -> dict[str, Any]:
    """Fail finding for a sweep in which every pair failed and no node explains it."""
    reason, n = Counter(p.get("reason") or p["status"] for p in bad_pairs).most_common(1)[0]
    return finding(
        "fail",
        "all_pairs_failed",
        "cluster",
        f"every one of {len(pairs)} pairs failed (most often: {reason}); suspect the probe "
        f"settings, the backend or the network as a whole. Example {_link(bad_pairs[0])}: "
        f"{_describe(bad_pairs[0])}",
    )


def _link_failures(links: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Fail findings for failed links no blamed node explains, capped at MAX_LINK_FINDINGS."""
    return _link_findings("fail", "link_failed", links, "failing links (see the matrix)")


def _link_findings(severity: str, code: str, links: list[dict[str, Any]], more: str) -> list[dict[str, Any]]:
    """A finding per link, the first MAX_LINK_FINDINGS of them, then one counting the rest ("and N more <more>")."""
    out = [finding(severity, code, _link(p), f"{_link(p)} {_describe(p)}") for p in links[:MAX_LINK_FINDINGS]]
    if len(links) > MAX_LINK_FINDINGS:
        out.append(finding(severity, code, "links", f"and {len(links) - MAX_LINK_FINDINGS} more {more}"))
    return out


def culprit_findings(
    nodes: Iterable[str],
    pairs: list[dict[str, Any]],
    offline_nodes: Iterable[str] = (),
    absent: Mapping[str, str] | None = None,
) -> list[dict[str, Any]]:
    """Fail findings for bad pairs, grouped by the node to blame where one explains them.

    ``offline_nodes``: nodes offline as the sweep ends (blamed for their offline pairs);
    ``absent``: nodes offline when it was planned, each with its silence ('last heartbeat ...').
    """
    offline_nodes, absent = set(offline_nodes), dict(absent or {})
    by_node = pairs_by_node(pairs)
    bad_pairs = [p for p in pairs if p["status"] in BAD]
    if not bad_pairs and not absent:
        return []
    everything_bad = len(bad_pairs) == len(pairs)
    out: list[dict[str, Any]] = []
    blamed: set[str] = set()
    for node in nodes:
        mine = by_node.get(node, [])
        mine_bad = [p for p in mine if p["status"] in BAD]
        if node in absent:
            found: dict[str, Any] | None = _absent_node(node, absent[node], mine, mine_bad)
        else:
            found = _node_culprit(node, mine, mine_bad, node in offline_nodes, everything_bad)
        if found is not None:
            blamed.add(node)
            out.append(found)
    if everything_bad and len(pairs) >= 2 and not blamed:
        return [*out, _all_pairs_failed(pairs, bad_pairs)]
    return out + _link_failures([p for p in bad_pairs if p["a"] not in blamed and p["b"] not in blamed])


def degraded_findings(pairs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A warn finding per link below its own baseline (a link slow next to its peers has the outlier finding that
    marked it: culprits.outliers, the slow node, segment or link, with the figures it was compared with)."""
    slow = [p for p in pairs if p["status"] == "degraded" and p.get("reason") != "below_peers"]
    return _link_findings("warn", "below_baseline", slow, "links below baseline")


def group_findings(group: dict[str, Any] | None, blamed: Iterable[str] = ()) -> list[dict[str, Any]]:
    """A finding for a group collective that did not pass; none where offline members already have theirs."""
    if not group or group.get("status") in (None, "ok", "skipped"):
        return []
    if group.get("reason") == "agent_offline" and set(blamed) & set(group.get("nodes") or ()):
        return []  # the node_offline findings say it, naming the node rather than the cluster
    severity = "warn" if group["status"] == "degraded" else "fail"
    n = len(group.get("nodes") or [])
    return [finding(severity, "group_collective", "cluster", f"all_reduce over all {n} nodes {_describe(group)}")]


def verdict(statuses: Iterable[str], findings: Iterable[dict[str, Any]]) -> str:
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
