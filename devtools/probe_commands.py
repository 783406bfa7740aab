"""Pair probe commands between two nodes on loopback, as the server sends them, and both halves run at once.

For the tests and the benchmarks: ``run_ranks`` runs each half through ``agents.runner.run_probe`` in a thread.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from agents import contract
from agents.runner import run_probe


def loopback_pair(rank: int, rendezvous: str, names: tuple[str, ...] = ("n0", "n1"), **fields: Any) -> dict[str, Any]:
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


def run_ranks(
    commands: list[dict[str, Any]],
    broker_url: str,
    on_event: Callable[[int, dict[str, Any]], object] | None = None,
) -> list[dict[str, Any]]:
    """Run every rank's half at once through the Redis rendezvous; results in rank order."""
    results: dict[int, dict[str, Any]] = {}
    errors: list[BaseException] = []

    def one(cmd: dict[str, Any]) -> None:
        try:
            results[cmd["rank"]] = run_probe(
                cmd, broker_url, on_event=(lambda e: on_event(cmd["rank"], e)) if on_event else None
            )
        except BaseException as e:  # surfaced below, in the test's thread
            errors.append(e)

    threads = [threading.Thread(target=one, args=(c,)) for c in commands]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return [results[c["rank"]] for c in commands]


def real_halves(broker_url: str, rendezvous: str, **fields: Any) -> list[dict[str, Any]]:
    """Both halves of one real Gloo pair probe on loopback, run by the agent's own probe code; an error unless
    both passed. The benchmarks write every simulated half from them, so each holds what a real half holds."""
    halves = run_ranks([loopback_pair(rank, rendezvous, **fields) for rank in (0, 1)], broker_url)
    if any(h.get("status") != "ok" for h in halves):
        raise RuntimeError(f"the template probe did not pass: {[h.get('reason') for h in halves]}")
    return halves
