"""What a discover sweep found: per node, the interface that reaches every peer. Pure: no Django.

Each pair probe of a discover sweep tries every combination of the two nodes'
candidate interfaces with a Gloo all_reduce and reports one row per combination.
Read per node, those rows say which of its interfaces reach which peers, so the
findings can name the ``GLOO_SOCKET_IFNAME`` / ``NCCL_SOCKET_IFNAME`` value to set
on each node, and warn about an interface a job left to choose could pick and hang on.
"""

from __future__ import annotations

from typing import Any

from cluster_health.core.finding_row import finding


def combination_rows(half_a: dict[str, Any] | None, half_b: dict[str, Any] | None) -> list[dict[str, Any]]:
    """A pair's combination rows; a combination works only if no rank saw it fail."""
    views = [(h or {}).get("extra", {}).get("interfaces") or [] for h in (half_a, half_b)]
    rows = [dict(r) for r in views[0] or views[1]]
    if views[0] and views[1]:
        other = {(r.get("rank0_interface"), r.get("rank1_interface")): r.get("ok") for r in views[1]}
        for row in rows:
            row["ok"] = bool(row.get("ok")) and other.get((row["rank0_interface"], row["rank1_interface"]), True)
    return rows


def _env(iface: str) -> str:
    return f"GLOO_SOCKET_IFNAME={iface} NCCL_SOCKET_IFNAME={iface}"


class Combinations:
    """Which interface combinations connect, by node: read from every pair's rows."""

    def __init__(self, rows_by_pair: list[list[dict[str, Any]]]):
        self.works: dict[tuple[str, str, str, str], bool] = {}
        self.addresses: dict[str, dict[str, str | None]] = {}  # node -> interface -> address
        self.pairs: set[tuple[str, str]] = set()  # (node, peer) pairs whose probe reported combinations
        for rows in rows_by_pair:
            for row in rows:
                a, ia, b, ib = row["rank0_node"], row["rank0_interface"], row["rank1_node"], row["rank1_interface"]
                self.works[(a, ia, b, ib)] = self.works[(b, ib, a, ia)] = bool(row.get("ok"))
                self.pairs.update({(a, b), (b, a)})
                self.addresses.setdefault(a, {}).setdefault(ia, row.get("rank0_address"))
                self.addresses.setdefault(b, {}).setdefault(ib, row.get("rank1_address"))

    def ok(self, node: str, iface: str, peer: str, peer_iface: str) -> bool:
        return self.works.get((node, iface, peer, peer_iface), False)

    def label(self, node: str, iface: str) -> str:
        addr = self.addresses.get(node, {}).get(iface)
        return f"{iface} ({addr})" if addr else iface

    def assignment(self, peers: dict[str, set[str]], registered: dict[str, str]) -> dict[str, str]:
        """One interface per node such that, where possible, every pair connects.

        One name on every node wins (a job's launch script sets one value), the name
        carrying most registered addresses first; otherwise start from each node's
        registered interface and move the nodes that fail to one that works with all peers.
        """
        nodes = [n for n in peers if n in self.addresses]
        start = {
            n: next((i for i, a in self.addresses[n].items() if a == registered.get(n)), next(iter(self.addresses[n])))
            for n in nodes
        }
        common = set.intersection(*(set(self.addresses[n]) for n in nodes)) if nodes else set()
        uniform = [name for name in common if all(self.ok(n, name, p, name) for n in nodes for p in peers[n])]
        if uniform:
            best = max(sorted(uniform), key=lambda name: sum(start[n] == name for n in nodes))
            return {n: best for n in nodes}
        chosen = dict(start)
        for _ in range(3 * len(nodes)):
            failing = [n for n in nodes if self.failing_peers(n, chosen, peers)]
            if not failing:
                break
            moved = False
            for n in failing:
                fit = [i for i in self.addresses[n] if not self.failing_peers(n, {**chosen, n: i}, peers)]
                if fit:
                    chosen[n], moved = fit[0], True
            if not moved:
                break
        return chosen

    def failing_peers(self, node: str, chosen: dict[str, str], peers: dict[str, set[str]]) -> list[str]:
        return sorted(p for p in peers[node] if p not in chosen or not self.ok(node, chosen[node], p, chosen[p]))


def _no_interface(combos: Combinations, node: str, want: set[str]) -> dict[str, str]:
    """Fail finding for a node none of whose interfaces connects to every peer."""
    seen = "; ".join(
        f"{combos.label(node, i)} connects to "
        f"{', '.join(sorted(p for p in want if any(combos.ok(node, i, p, j) for j in combos.addresses.get(p, {})))) or 'no peer'}"
        for i in combos.addresses[node]
    )
    return finding(
        "fail",
        "interface_none",
        node,
        f"{node}: no interface connects to every peer ({seen}); "
        "no GLOO_SOCKET_IFNAME setting lets a job span every node",
    )


def _hanging_interfaces(combos: Combinations, node: str, chosen: dict[str, str], want: set[str]) -> list[str]:
    """The node's other interfaces a job could pick and hang on, each with the peers it fails with."""
    hangs = []
    for iface in combos.addresses[node]:
        if iface == chosen[node]:
            continue
        failed = sorted(
            {
                f"{p}:{j}"
                for p in want
                for j in {iface, chosen.get(p)}
                if j and (node, iface, p, j) in combos.works and not combos.ok(node, iface, p, j)
            }
        )
        if failed:
            hangs.append(
                f"{combos.label(node, iface)} fails with {', '.join(failed[:6])}"
                + (f" and {len(failed) - 6} more" if len(failed) > 6 else "")
            )
    return hangs


def _node_interface(combos: Combinations, node: str, chosen: dict[str, str], want: set[str]) -> dict[str, str]:
    """Finding naming the interface that connects a node to its peers, warning if another could hang a job."""
    mine = chosen[node]
    text = f"{node}: {combos.label(node, mine)} connects to " + (
        "its peer" if len(want) == 1 else f"all {len(want)} peers"
    )
    hangs = _hanging_interfaces(combos, node, chosen, want)
    if hangs:
        return finding(
            "warn",
            "interface_dead",
            node,
            f"{text}; {'; '.join(hangs)}: a job left to pick its interface can hang there. Set {_env(mine)} on {node}",
        )
    return finding("info", "interface_ok", node, f"{text}: {_env(mine)} works")


def _cluster_interface(chosen: dict[str, str]) -> dict[str, str]:
    """Info finding with the launch setting for the whole cluster: one name, or one per node."""
    if len(set(chosen.values())) == 1:
        text = (
            f"{next(iter(chosen.values()))} connects every pair: launch jobs with {_env(next(iter(chosen.values())))}"
        )
    else:
        text = "set per node: " + ", ".join(f"{n} {_env(i)}" for n, i in sorted(chosen.items()))
    return finding("info", "interface_all", "cluster", text)


def interface_findings(
    rows_by_pair: list[list[dict[str, Any]]],
    peers_by_node: dict[str, set[str]],
    addresses: dict[str, str] | None = None,
) -> list[dict[str, str]]:
    """Findings naming the interface to set on each node, and the interfaces a job could hang on.

    ``peers_by_node``: the peers each node was paired with in the sweep (a pair whose
    probe never ran leaves its peers unreached). ``addresses``: each node's registered
    address; among assignments that work, the interfaces carrying them are preferred.
    """
    combos = Combinations(rows_by_pair)
    # A pair whose probe never ran says nothing about interfaces: its cell and the culprit findings say why.
    peers_by_node = {n: {p for p in ps if (n, p) in combos.pairs} for n, ps in peers_by_node.items()}
    chosen = combos.assignment(peers_by_node, addresses or {})
    out = []
    for node in sorted(chosen):
        if combos.failing_peers(node, chosen, peers_by_node):
            out.append(_no_interface(combos, node, peers_by_node[node]))
        else:
            out.append(_node_interface(combos, node, chosen, peers_by_node[node]))
    if chosen and not any(f["severity"] == "fail" for f in out):
        out.append(_cluster_interface(chosen))
    return out
