"""Pairs and facts of a node advertising an address its peers cannot reach, as the sweep reads them."""

from __future__ import annotations

from itertools import combinations

from cluster_health.core import evidence

NODES = ["n1", "n2", "n3", "n4"]
ADDRESSES = {"n1": "10.0.0.1", "n2": "10.0.0.2", "n3": "10.0.0.3", "n4": "10.0.0.4"}
PORT = 41233
UNREACHABLE = ("failed", "connect", "unreachable")


def interface(name, *addresses, up=True, loopback=False):
    return {"name": name, "up": up, "loopback": loopback, "mtu": 1500, "addresses": list(addresses)}


def facts_of(node, second=None):
    """A node's facts: loopback, eth0 on the peers' network (10.0.0.x), and maybe a second NIC, eth1."""
    n = node[1:]
    ifaces = [interface("lo", "127.0.0.1", loopback=True), interface("eth0", f"10.0.0.{n}")]
    if second:
        ifaces.append(interface("eth1", second))
    return {"interfaces": ifaces}


def probe(a, b, addresses, how=None, bound=None, used=None):
    """A pair built from its two halves the way the probe fills their evidence.

    how: (status, stage, reason) of a pair that failed, None for one that passed; a (rank 0) binds its store
    on ``bound`` (default: its advertised address) and b dials a's advertised address; used: node -> the
    interface its half went out on (default eth0).
    """
    used = used or {}
    ok = how is None
    half_a = {
        "node": a,
        "evidence": {
            "interface": used.get(a, "eth0"),
            "store": {"role": "listen", "address": f"{bound or addresses[a]}:{PORT}", "connected": ok},
        },
    }
    half_b = {
        "node": b,
        "evidence": {
            "interface": used.get(b, "eth0"),
            "store": {"role": "connect", "address": f"{addresses[a]}:{PORT}", "connected": ok},
        },
    }
    status, stage, reason = how or ("ok", "collective", None)
    return {
        "a": a,
        "b": b,
        "status": status,
        "stage": stage,
        "reason": reason,
        "busbw_gbps": None,
        "sizes": [],
        "evidence": evidence.pair_evidence(half_a, half_b),
    }


def advertising(node, address, how=UNREACHABLE, bound=None, nodes=NODES):
    """(addresses, pairs): every pair of ``nodes`` in planner order, ``node`` advertising ``address``, its pairs
    as rank 0 failing ``how`` (its peers dial the address)."""
    addresses = {**ADDRESSES, node: address}
    pairs = [
        probe(a, b, addresses, how if a == node else None, bound if a == node else None)
        for a, b in combinations(nodes, 2)
    ]
    return addresses, pairs
