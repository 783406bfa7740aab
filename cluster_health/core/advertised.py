"""The address a node advertises, when its peers cannot reach it: named, with the address that works. Pure.

A node's agent advertises the address its peers reach it at (``--address``, else the
interface that routes to the broker). Set to an address on a dead second NIC, to
loopback, to a name that resolves to loopback on the node, or to an address the node
does not have, it fails every pair where the node hosts the store (rank 0: the peer
dials the advertised address), while the node's own connections out (rank 1) work from
another of its addresses. The matrix then reads like a firewall on inbound connections
(``culprits.inbound_blocked``), a node that is the common factor, or one that fails with
everyone; this rule names the address, how each peer failed on it and the address that
works, and takes the place of those findings for the pairs it explains.

Pairs are the culprit rules' (``a`` is rank 0 and binds the store, ``b`` dials it; their
``evidence`` keeps each side's store address and the interface it used). Facts are the
agents' own (agents/facts.py): ``interfaces``, each {name, up, loopback, addresses}.
"""

from __future__ import annotations

import ipaddress
from collections import Counter
from collections.abc import Mapping
from typing import Any

from cluster_health.core import culprits
from cluster_health.core.finding_row import finding

CODE = "unroutable_address"
BAD = culprits.BAD
PASSED = culprits.PASSED
# How a dial to the advertised address fails: the kernel's answer, or none. A store_timeout may
# follow a dial that worked, so it says nothing about the address.
DIAL_REASONS = ("connect_timeout", "refused", "unreachable")
DIAL_STAGES = culprits.CONNECT_STAGES
# The node's own half refuses to bind an address it does not have, before any peer dials.
NOT_HERE = ("resolve", "interface_missing")
# Findings that read the same failures less precisely; replaced where the address explains all their pairs.
SUPERSEDED = ("inbound_blocked", "node_common_factor", "node_unreachable")


def _ip(value: str | None) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(str(value).split("%")[0])
    except ValueError:
        return None


def is_loopback(address: str | None) -> bool:
    """Whether an address (or the name ``localhost``) is on loopback, where every host reaches only itself."""
    if address == "localhost":
        return True
    ip = _ip(address)
    return bool(ip and ip.is_loopback)


def _host(address: str | None) -> str | None:
    """'198.18.0.11:41233' -> '198.18.0.11'."""
    if not address:
        return None
    host, sep, port = str(address).rpartition(":")
    return host if sep and port.isdigit() else str(address)


def _side(p: Mapping[str, Any], role: str) -> dict[str, Any]:
    return ((p.get("evidence") or {}).get(role)) or {}


def _store_address(side: Mapping[str, Any]) -> str | None:
    """Where a side's store listened (rank 0) or what it dialled (rank 1)."""
    return _host((side.get("store") or {}).get("address"))


def _interfaces(facts: Mapping[str, Any] | None) -> list[dict[str, Any]]:
    found = (facts or {}).get("interfaces") or []
    return [i for i in found if isinstance(i, dict) and i.get("name")] if isinstance(found, list) else []


def _ipv4(iface: Mapping[str, Any]) -> str | None:
    return next((a for a in iface.get("addresses") or [] if isinstance(a, str) and ":" not in a), None)


def _resolved_here(address: str, facts: Mapping[str, Any] | None) -> list[str]:
    """What the node's own name resolves to on the node (its facts), where the advertised address is that name."""
    host = (facts or {}).get("host")
    if not isinstance(host, dict) or address not in (host.get("hostname"), host.get("fqdn")):
        return []
    return sorted(a for a in host.get("resolves_to") or [] if isinstance(a, str))


def _failed_dial(p: Mapping[str, Any]) -> bool:
    """Whether the peer's dial to the node's store failed, or the node could not bind the address at all."""
    if p["status"] not in BAD:
        return False
    if (p.get("stage"), p.get("reason")) == NOT_HERE:
        return True
    return p.get("stage") in DIAL_STAGES and p.get("reason") in DIAL_REASONS


def _connected_out(p: Mapping[str, Any]) -> bool:
    """Whether the node, dialling as rank 1 (``b``), reached its peer's store."""
    store = _side(p, "b").get("store") or {}
    return bool(store.get("role") == "connect" and store.get("connected")) or p["status"] in PASSED


def _shared_bits(a: str, b: str) -> int:
    x, y = _ip(a), _ip(b)
    if not x or not y or x.version != y.version:
        return 0
    return x.max_prefixlen - (int(x) ^ int(y)).bit_length()


def _on_peers_network(address: str, ifaces: list[dict[str, Any]], peer_addresses: list[str]) -> tuple[str, str] | None:
    """(interface, address) of the node that shares the longest prefix with its peers' addresses, where that is
    longer than the advertised address shares: the node's address on its peers' network, from its facts alone."""

    def score(a: str) -> int:
        return max((_shared_bits(a, peer) for peer in peer_addresses), default=0)

    best = None
    for iface in ifaces:
        addr = _ipv4(iface)
        if iface.get("up") and not iface.get("loopback") and addr and addr != address:
            if score(addr) > score(address) and (best is None or score(addr) > score(best[1])):
                best = (iface["name"], addr)
    return best


def _how(p: Mapping[str, Any], node: str) -> str:
    """How one peer failed on the address: "host3 timeout at connect (connect_timeout)", or the node's own refusal."""
    if (p.get("stage"), p.get("reason")) == NOT_HERE:
        return f"{node} itself {p['status']} at {p.get('stage')} ({p.get('reason')}) with {p['b']}"
    return f"{p['b']} {p['status']} at {p.get('stage')} ({p.get('reason')})"


def _unroutable(
    node: str,
    address: str,
    facts: Mapping[str, Any] | None,
    mine: list[dict[str, Any]],
    pairs_of: Mapping[str, list[dict[str, Any]]],
    addresses: Mapping[str, str],
) -> dict[str, Any] | None:
    """The finding for one node, or None when its peers reach its address or the address is not the cause."""
    # Offline pairs say nothing about the address: the peer's agent was silent.
    inbound = [p for p in mine if p["a"] == node and p["status"] != "offline"]
    failed = [p for p in inbound if _failed_dial(p)]
    if not failed or len(failed) != len(inbound):
        return None  # a peer reached the address: it routes
    peers = {p["b"] for p in failed}
    if all(is_loopback(addresses.get(peer)) for peer in peers):
        return None  # its peers share its host (loopback agents): loopback is where they meet
    elsewhere = all(
        any(q["status"] in PASSED and node not in (q["a"], q["b"]) for q in pairs_of.get(peer, ())) for peer in peers
    )
    if not elsewhere and len(pairs_of) > 2:
        return None  # the peers fail with others too: the fault is theirs
    peer_addresses = [a for n, a in addresses.items() if n != node and _ip(a)]
    outbound = [p for p in mine if p["b"] == node and _connected_out(p)]
    ifaces = _interfaces(facts)
    on = next((i for i in ifaces if address in (i.get("addresses") or [])), None)
    used = Counter(_side(p, "b").get("interface") for p in outbound if _side(p, "b").get("interface"))
    working_iface = used.most_common(1)[0][0] if used else None
    working = next((_ipv4(i) for i in ifaces if i["name"] == working_iface), None) if working_iface else None
    # What the address is on the node itself: where its store listened, else what its own name resolves to there.
    bound = sorted({a for p in failed if (a := _store_address(_side(p, "a")))}) or _resolved_here(address, facts)
    tried = sorted({a for p in failed if (a := _store_address(_side(p, "b")))} - {address})
    if is_loopback(address):
        problem = "it is a loopback address, so each peer dialled its own host"
    elif bound and all(is_loopback(a) for a in bound) and not (tried and all(is_loopback(a) for a in tried)):
        problem = f"it resolves on {node} to {', '.join(bound)} (loopback)"
        if tried:
            problem += f", where its store listened while its peers dialled {', '.join(tried)}"
    elif any((p.get("stage"), p.get("reason")) == NOT_HERE for p in failed) or (ifaces and _ip(address) and on is None):
        have = sorted({a for i in ifaces for a in i.get("addresses") or [] if not is_loopback(a)})
        problem = f"it is not an address of {node}" + (f" (it has {', '.join(have)})" if have else "")
    elif on is not None and not on.get("up"):
        problem = f"it is on {on['name']}, which is down"
    elif on is not None and working_iface and on["name"] != working_iface:
        out_to = ", ".join(sorted({p["a"] for p in outbound}))
        problem = (
            f"it is on {on['name']}, while {node} connects out fine from {working_iface}"
            f"{f' ({working})' if working else ''} (to {out_to}): check {on['name']}'s link and network"
        )
    elif on is not None and not working_iface and (other := _on_peers_network(address, ifaces, peer_addresses)):
        working_iface, working = other
        problem = f"it is on {on['name']}, off its peers' network, while its {working_iface} ({working}) is on it"
    else:
        return None  # the address is where the node's traffic goes: a firewall or a link, not the address
    if working is None and (other := _on_peers_network(address, ifaces, peer_addresses)):
        working_iface, working = other
    if working:
        fix = f"start {node}'s agent with --address {working} (or CLUSTER_HEALTH_NODE_ADDRESS={working})"
    else:
        fix = f"start {node}'s agent with --address set to an address its peers reach (CLUSTER_HEALTH_NODE_ADDRESS)"
    if working_iface:
        fix += f"; jobs on {node}: GLOO_SOCKET_IFNAME={working_iface} NCCL_SOCKET_IFNAME={working_iface}"
    shown = address + (f" ({on['name']})" if on is not None else "")
    more = f" and {len(failed) - culprits.MAX_LISTED} more" if len(failed) > culprits.MAX_LISTED else ""
    fails = ", ".join(_how(p, node) for p in failed[: culprits.MAX_LISTED]) + more
    text = (
        f"{node}'s advertised address {shown} is unreachable from its peers ({len(failed)} of {len(inbound)} "
        f"failed on it: {fails}): {problem}. Fix: {fix}"
    )
    chain = [
        f"{p['b']} -> {node} at {_store_address(_side(p, 'b')) or address}: {p['status']} at {p.get('stage')} "
        f"({p.get('reason')})"
        for p in failed
    ] + [f"{node} -> {p['a']} (store) from {_side(p, 'b').get('interface') or '?'}: connected" for p in outbound]
    return {
        **finding("fail", CODE, node, text),
        "pairs": [culprits.pair_name(p) for p in failed],
        "detail": {
            "evidence": chain,
            "next_step": fix,
            "address": address,
            "interface": on["name"] if on is not None else None,
            "working_address": working,
            "working_interface": working_iface,
            "peers": [
                {"node": p["b"], "status": p["status"], "stage": p.get("stage"), "reason": p.get("reason")}
                for p in failed
            ],
        },
    }


def unroutable_addresses(
    addresses: Mapping[str, str], facts: Mapping[str, Mapping[str, Any] | None], pairs: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    """A fail finding for each node whose advertised address its peers fail to reach, with the one that works.

    addresses: node name -> the address its agent advertises; facts: node name -> its agent's facts.
    """
    pairs_of = culprits.pairs_by_node(pairs)
    out = []
    for node in sorted(addresses):
        if not addresses[node] or node not in pairs_of:
            continue
        found = _unroutable(node, addresses[node], facts.get(node), pairs_of[node], pairs_of, addresses)
        if found is not None:
            out.append(found)
    return out


def name_unroutable(
    found: list[dict[str, Any]],
    pairs: list[dict[str, Any]],
    addresses: Mapping[str, str],
    facts: Mapping[str, Mapping[str, Any] | None],
) -> list[dict[str, Any]]:
    """The sweep's findings with each unroutable address named, in place of the findings it explains.

    A node's inbound-blocked, common-factor or every-pair-failed finding goes where every bad
    pair of the node is one the address explains; a failed link's, where its pair is.
    """
    named = unroutable_addresses(addresses, facts, pairs)
    if not named:
        return found
    by_node = {f["subject"]: f for f in named}
    explained = {name for f in named for name in f["pairs"]}
    bad_of: dict[str, set[str]] = {}
    for p in pairs:
        if p["status"] in BAD:
            for n in (p["a"], p["b"]):
                bad_of.setdefault(n, set()).add(culprits.pair_name(p))
    out: list[dict[str, Any]] = []
    for f in found:
        mine = by_node.get(f["subject"])
        if f["code"] in SUPERSEDED and mine is not None and bad_of.get(f["subject"], set()) <= set(mine["pairs"]):
            if mine not in out:
                out.append(mine)  # where the finding it replaces stood
            continue
        if f["code"] == "link_failed" and f["subject"] in explained:
            continue
        out.append(f)
    return out + [f for f in named if f not in out]
