"""Pair probe commands between two nodes on loopback, as the server sends them: for the tests and benchmarks."""

from __future__ import annotations

from typing import Any

from agents import contract


def loopback_pair(rank: int, rendezvous: str, names: tuple[str, str] = ("n0", "n1"), **fields: Any) -> dict:
    """Rank ``rank``'s half of a Gloo pair probe between ``names``, both on 127.0.0.1.

    ``fields`` add to the command or replace its defaults (probe and sweep 1); the contract
    fills in what is left out (sizes, iterations, stage timeouts) when the agent validates it.
    """
    return {
        "v": contract.VERSION,
        "kind": "pair",
        "probe_id": 1,
        "sweep_id": 1,
        "rendezvous": rendezvous,
        "node": names[rank],
        "rank": rank,
        "world_size": 2,
        "backend": "gloo",
        "bind_address": "127.0.0.1",
        "master_address": "127.0.0.1",
        "peers": [{"name": name, "address": "127.0.0.1"} for name in names],
        **fields,
    }
