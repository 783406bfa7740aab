"""The discover kind: every pair of candidate interfaces tried in turn, and which to set for a job.

Between two hosts, each combination of one interface per side gets a Gloo group of its
own and a checked all_reduce; the two ranks step through the combinations in lockstep.
The result's hint names the working combinations and the GLOO/NCCL_SOCKET_IFNAME each
side should set.
"""

from __future__ import annotations

import itertools
import threading
import time
from datetime import timedelta
from typing import Any

from agents import contract, netinfo
from agents.probe.errors import StageFailure, classify_collective_error, first_line
from agents.probe.state import KEY, ProbeState


def discover(p: ProbeState, store: Any, peers: dict[int, dict[str, Any]]) -> None:
    if p.n != 2:
        raise StageFailure("probe_crashed", "interface discovery runs between two hosts (world_size 2)")
    loop = netinfo.is_loopback(p.master_ip or "")
    lists = [[c for c in peers[r]["candidates"] if c["loopback"] == loop] for r in (0, 1)]
    combos = list(itertools.product(*lists))[: contract.MAX_DISCOVER_COMBINATIONS]
    attempt = min(contract.DISCOVER_ATTEMPT_S, p.t["init"])
    p.enter("init", contract.discover_budget_s(p.t["init"], len(combos)), step="discover")
    rows = [try_interfaces(p, store, peers, i, pair, attempt) for i, pair in enumerate(combos)]
    p.extra["interfaces"] = rows
    good = [r for r in rows if r["ok"]]
    if not rows:
        raise StageFailure(
            "interface_missing",
            f"no candidate interfaces to try between {peers[0]['node']} and "
            f"{peers[1]['node']} (up, with an IPv4 address)",
        )
    if not good:
        tried = "; ".join(f"{r['rank0_interface']}-{r['rank1_interface']}: {r['error']}" for r in rows)
        raise StageFailure(
            "transport", f"no interface combination connects {peers[0]['node']} and {peers[1]['node']} ({tried})"
        )
    p.enter("collective", p.t["collective"])
    p.finish("ok", hint=interface_hint(rows))


def try_interfaces(
    p: ProbeState, store: Any, peers: dict[int, dict[str, Any]], i: int, pair: tuple[Any, ...], attempt: float
) -> dict[str, Any]:
    """One interface combination: a Gloo group over it and a checked all_reduce, then lockstep with the peer."""
    from torch._C._distributed_c10d import ProcessGroupGloo

    torch, dist = p.torch, p.dist
    mine = pair[p.rank]
    row = {
        "rank0_node": peers[0]["node"],
        "rank0_interface": pair[0]["name"],
        "rank0_address": pair[0]["address"],
        "rank1_node": peers[1]["node"],
        "rank1_interface": pair[1]["name"],
        "rank1_address": pair[1]["address"],
    }
    began = time.monotonic()

    def try_combination() -> None:
        try:
            opts = ProcessGroupGloo._Options()  # type: ignore[attr-defined]  # torch's private Gloo options
            opts._devices = [ProcessGroupGloo.create_device(interface=mine["name"])]
            opts._timeout = timedelta(seconds=attempt)
            pg = ProcessGroupGloo(dist.PrefixStore(f"{KEY}discover/{i}", store), p.rank, 2, opts)
            tensor = torch.full((1,), float(p.rank + 1))
            pg.allreduce([tensor]).wait()  # type: ignore[attr-defined]  # bound in C++, untyped
            row["ok"] = bool(tensor.item() == 3.0)
            row["error"] = None if row["ok"] else "wrong sum"
        except Exception as e:
            row["ok"], row["error"] = False, first_line(e)
            row["reason"] = classify_collective_error(str(e), "init")[1]

    # Gloo's own timeout does not bound every wait (a connect on a dead network can
    # outlast it), so each attempt runs in a thread that is given up on, not joined.
    worker = threading.Thread(target=try_combination, daemon=True, name=f"discover-{i}")
    worker.start()
    worker.join(attempt + 1.0)
    if "ok" not in row:
        row["ok"], row["error"] = False, f"no connection within {attempt + 1.0:.0f}s"
        row["reason"] = "transport"
    row["ms"] = round((time.monotonic() - began) * 1000, 1)
    # Lockstep: neither side starts the next combination before both have left this one.
    store.set(f"{KEY}discover/{i}/done/{p.rank}", "1")
    try:
        store.wait(
            [f"{KEY}discover/{i}/done/{1 - p.rank}"],
            timedelta(seconds=attempt + contract.DISCOVER_LOCKSTEP_S + 1.0),
        )
    except Exception as e:
        raise StageFailure.timed_out(
            "transport",
            f"{peers[1 - p.rank]['node']} stopped answering during interface "
            f"discovery (combination {row['rank0_interface']}-{row['rank1_interface']})",
            e,
        ) from None
    return dict(row)


def interface_hint(rows: list[dict[str, Any]]) -> str:
    """Which interface combinations work and fail, and the GLOO/NCCL_SOCKET_IFNAME each side should set."""
    good = [r for r in rows if r["ok"]]
    # One name on both sides first: that is a single setting in a job's launch script.
    best = next((r for r in good if r["rank0_interface"] == r["rank1_interface"]), good[0])

    def combo(r: dict[str, Any]) -> str:
        return f"{r['rank0_node']}:{r['rank0_interface']} <-> {r['rank1_node']}:{r['rank1_interface']}"

    failing = [r for r in rows if not r["ok"]]
    working = ", ".join(combo(r) for r in good) + (
        f"; failing: {', '.join(combo(r) for r in failing)}" if failing else ""
    )
    return (
        f"working: {working}; set GLOO_SOCKET_IFNAME={best['rank0_interface']} "
        f"NCCL_SOCKET_IFNAME={best['rank0_interface']} on {best['rank0_node']} and "
        f"GLOO_SOCKET_IFNAME={best['rank1_interface']} NCCL_SOCKET_IFNAME={best['rank1_interface']} "
        f"on {best['rank1_node']}"
    )
