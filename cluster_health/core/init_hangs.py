"""Init-time hangs: a job stuck at ``init_process_group`` (its store, its rendezvous) or connecting its
process group's pairs, before any collective has a sequence number. Pure: no Django.

Input: every entry the nodes reported (agents/hangs/inspect.py): the job's ranks, each with the
``init`` section its stack and sockets gave (``stage``: store_connect, store_wait, pair_connect; the
``peer`` it tries and that connection's state; the addresses it listens on; the interface its store
connection leaves by), torchrun's launchers (``role: launcher``, at their ``rendezvous``, with their
``--nnodes``/``--node-rank`` and endpoint), ranks whose MASTER_ADDR names another master
(``master_differs``) and other programs holding the master's port (``role: listener``). Output: which
ranks arrived and which did not, where each waits, and why, most likely first:

- ``application``: the master's port held by a process that is not the job's (port in use), or a rank
  (or launcher) pointing at another master (its MASTER_ADDR differs from the others');
- ``network``: a rank that advertised an address its peers cannot reach (it listens on loopback, or peers
  wait on a SYN to it), or a rank whose SYN to the store or a peer goes unanswered (a firewall, a route);
- ``node``: ranks that never arrived, with the node each should be on (the asked node whose agent found
  nothing of the job; torchrun's node ranks that no launcher holds).
"""

from __future__ import annotations

import ipaddress
from collections import Counter
from typing import Any

STAGES = ("rendezvous", "store_connect", "store_wait", "pair_connect", "first_collective")


def split(entries: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """A node report's entries by what they are: ranks, launchers, other-master ranks, port holders."""
    out: dict[str, list[dict[str, Any]]] = {"ranks": [], "launchers": [], "other_master": [], "listeners": []}
    for e in entries:
        if not isinstance(e, dict):
            continue
        role = e.get("role")
        if role == "launcher":
            out["launchers"].append(e)
        elif role == "listener":
            out["listeners"].append(e)
        elif e.get("master_differs"):
            out["other_master"].append(e)
        else:
            out["ranks"].append(e)
    return out


def _loopback(address: str) -> bool:
    host = address.rpartition(":")[0] if ":" in address else address
    try:
        return ipaddress.ip_address(host.strip("[]").replace("::ffff:", "")).is_loopback
    except ValueError:
        return host == "localhost"


def _host(endpoint: str | None) -> str:
    return (endpoint or "").rpartition(":")[0]


def _init(e: dict[str, Any]) -> dict[str, Any]:
    init = e.get("init")
    return init if isinstance(init, dict) else {}


def _launch(e: dict[str, Any]) -> dict[str, Any]:
    launch = e.get("launch")
    return launch if isinstance(launch, dict) else {}


def _culprit(
    kind: str, subject: str, nodes: list[Any], ranks: list[Any], text: str, hint: str, evidence: Any
) -> dict[str, Any]:
    return {
        "kind": kind,
        "subject": subject,
        "nodes": sorted({str(n) for n in nodes if n}),
        "ranks": sorted(r for r in ranks if isinstance(r, int)),
        "text": text,
        "hint": hint,
        "evidence": evidence,
    }


def _who(e: dict[str, Any]) -> str:
    if e.get("role") == "launcher":
        return f"the launcher on {e.get('node')} (node rank {_launch(e).get('node_rank')})"
    return f"rank {e.get('rank')} on {e.get('node')}"


def at_init(entries: dict[str, list[dict[str, Any]]]) -> bool:
    """Whether the job is at init: a rank waits at an init stage, or only launchers, other-master ranks
    or another program on the master's port were found."""
    if any(_init(r).get("stage") for r in entries["ranks"] if not r.get("moved")):
        return True
    return not entries["ranks"] and bool(entries["launchers"] or entries["other_master"] or entries["listeners"])


def _job_master(entries: dict[str, list[dict[str, Any]]]) -> str | None:
    """The master most of the job points at: its ranks' MASTER_ADDR, else its launchers' endpoint host."""
    addrs = Counter(str(_launch(r).get("MASTER_ADDR")) for r in entries["ranks"] if _launch(r).get("MASTER_ADDR"))
    addrs.update(_host(_launch(e).get("endpoint")) for e in entries["launchers"] if not e.get("master_differs"))
    return addrs.most_common(1)[0][0] if addrs else None


def _summary(
    entries: dict[str, list[dict[str, Any]]],
    world: int | None,
    expected: list[str],
    missing: list[int],
    absent: list[dict[str, Any]],
) -> dict[str, Any]:
    waiting = [
        {
            "rank": r.get("rank"),
            "node": r.get("node"),
            "pid": r.get("pid"),
            **{k: _init(r).get(k) for k in ("stage", "peer", "peer_state", "interface")},
        }
        for r in entries["ranks"] + entries["other_master"]
        if _init(r).get("stage")
    ]
    stages = [w["stage"] for w in waiting if w["stage"] in STAGES]
    launchers = [
        {
            "node": e.get("node"),
            "pid": e.get("pid"),
            "node_rank": _launch(e).get("node_rank"),
            "nnodes": _launch(e).get("nnodes"),
            "endpoint": _launch(e).get("endpoint"),
            "stage": _init(e).get("stage"),
            "master_differs": bool(e.get("master_differs")),
        }
        for e in entries["launchers"]
    ]
    return {
        "stage": min(stages, key=STAGES.index) if stages else ("rendezvous" if launchers else None),
        "world_size": world,
        "arrived": sorted(r.get("rank") for r in entries["ranks"] if isinstance(r.get("rank"), int)),
        "missing": missing[:64],
        "missing_node_ranks": absent[0]["evidence"]["missing_node_ranks"] if absent else [],
        "waiting": waiting[:64],
        "launchers": launchers[:64],
        "other_master": [
            {"rank": r.get("rank"), "node": r.get("node"), "master": _launch(r).get("MASTER_ADDR")}
            for r in entries["other_master"]
        ][:64],
        "port_holders": [
            {k: h.get(k) for k in ("node", "address", "port", "pid", "comm", "uid")} for h in entries["listeners"]
        ][:8],
        "expected_nodes": expected[:64],
    }


def _port_in_use(entries: dict[str, list[dict[str, Any]]]) -> list[dict[str, Any]]:
    out = []
    for h in entries["listeners"]:
        connected = [r for r in entries["ranks"] if _init(r).get("stage") == "store_connect"]
        text = (
            f"MASTER_PORT {h.get('port')} on {h.get('node')} is held by `{h.get('comm') or '?'}` (pid {h.get('pid')}), "
            "a process that is not the job's: the job's store could not listen there (EADDRINUSE), and "
            + (
                f"rank(s) {', '.join(str(r.get('rank')) for r in connected[:8])} connect to that process and wait"
                if connected
                else "the ranks that connect to it wait"
            )
        )
        hint = (
            f"MASTER_PORT=<a port nothing listens on at {h.get('node')}> (see `ss -ltnp` there), or stop "
            f"`{h.get('comm') or '?'}` (pid {h.get('pid')}) first"
        )
        out.append(
            _culprit(
                "node",
                f"{h.get('node')}:{h.get('port')}",
                [h.get("node")],
                [r.get("rank") for r in connected],
                text,
                hint,
                {"listener": h},
            )
        )
    return out


def _other_master(entries: dict[str, list[dict[str, Any]]], master: str | None) -> list[dict[str, Any]]:
    out = []
    for r in entries["other_master"]:
        theirs = _launch(r).get("MASTER_ADDR")
        text = (
            f"{_who(r)} points at another master: its MASTER_ADDR is {theirs}, the job's {master or '?'}; it waits "
            f"at {_init(r).get('stage') or 'init'} for {_init(r).get('peer') or theirs} while the job waits for it"
        )
        out.append(
            _culprit(
                "rank",
                f"rank {r.get('rank')}",
                [r.get("node")],
                [r.get("rank")],
                text,
                f"MASTER_ADDR={master} on {r.get('node')} (it has MASTER_ADDR={theirs})"
                if master
                else "give every rank the same MASTER_ADDR",
                {"rank": r.get("rank"), "master": theirs, "init": _init(r)},
            )
        )
    for e in entries["launchers"]:
        if e.get("master_differs"):
            theirs = _launch(e).get("endpoint")
            text = f"{_who(e)} points at another master: its rendezvous endpoint is {theirs}, the job's {master or '?'}"
            flag = "--rdzv-endpoint" if _launch(e).get("rdzv_endpoint") else "--master-addr"
            out.append(
                _culprit(
                    "node",
                    e.get("node") or "?",
                    [e.get("node")],
                    [],
                    text,
                    f"{flag} {master} (MASTER_ADDR={master}) for torchrun on {e.get('node')}",
                    {"launcher": _launch(e), "pid": e.get("pid")},
                )
            )
    return out


def _unreachable_addresses(entries: dict[str, list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """Ranks whose process group listens where its peers cannot reach: loopback in a job of several nodes,
    or an address a peer's SYN to goes unanswered."""
    ranks = entries["ranks"]
    nodes = {r.get("node") for r in ranks} | {e.get("node") for e in entries["launchers"]}
    store_ports = {str(_launch(r).get("MASTER_PORT")) for r in ranks}
    owner = {}
    for r in ranks:
        for addr in _init(r).get("listening") or []:
            if addr.rpartition(":")[2] not in store_ports and not addr.startswith("*"):
                owner[addr] = r
    trying: dict[str, list[dict[str, Any]]] = {}
    for r in ranks:
        init = _init(r)
        if init.get("stage") == "pair_connect" and init.get("peer") and init.get("peer_state") == "syn-sent":
            trying.setdefault(init["peer"], []).append(r)
    out, named = [], set()
    for r in ranks:
        init = _init(r)
        mine = [a for a in init.get("listening") or [] if a in owner and owner[a] is r]
        if init.get("stage") != "pair_connect" or not mine:
            continue
        # Loopback is unreachable to peers on other nodes: the job spans several, or its store is reached
        # off the host (a peer there may have exited already, refused at that address).
        offhost = len(nodes) > 1 or not _loopback(str(_launch(r).get("MASTER_ADDR") or "127.0.0.1"))
        loop = offhost and all(_loopback(a) for a in mine)
        waited = [w for a in mine for w in trying.get(a, []) if w.get("node") != r.get("node")]
        if not (loop or waited):
            continue
        named.add(id(r))
        ifname = init.get("interface")
        var = "NCCL_SOCKET_IFNAME" if _launch(r).get("NCCL_SOCKET_IFNAME") else "GLOO_SOCKET_IFNAME"
        set_to = _launch(r).get(var)
        why = (
            f"it listens on {', '.join(mine[:4])}, a loopback address, while its store is at "
            f"{_launch(r).get('MASTER_ADDR')} off its host"
            if loop
            else f"rank(s) {', '.join(str(w.get('rank')) for w in waited[:8])} send SYNs to {mine[0]} unanswered"
        )
        text = (
            f"{_who(r)} advertised an address its peers cannot reach: {why}"
            + (f" ({var}={set_to} on {r.get('node')})" if set_to else "")
            + "; the process group's connectFullMesh waits"
        )
        hint = (
            f"{var}={ifname} on {r.get('node')} (the interface its store connection uses)"
            if ifname
            else f"{var}=<the interface of {r.get('node')}'s cluster address>; and the hostname must not resolve to "
            "127.0.1.1 in /etc/hosts"
        )
        out.append(
            _culprit(
                "rank",
                f"rank {r.get('rank')}",
                [r.get("node")] + [w.get("node") for w in waited],
                [r.get("rank")],
                text,
                hint,
                {"listening": mine, "init": init, "waited_by": [w.get("rank") for w in waited]},
            )
        )
    for peer, waiters in trying.items():
        if peer in owner:
            continue
        for r in waiters:
            out.append(
                _culprit(
                    "link",
                    f"{r.get('node')}->{peer}",
                    [r.get("node")],
                    [r.get("rank")],
                    f"{_who(r)} sends SYNs to {peer} unanswered while connecting its process group's pairs, "
                    "an address no rank of the job listens on",
                    "a peer advertised an address on a dead or wrong interface: set GLOO_SOCKET_IFNAME "
                    "(NCCL_SOCKET_IFNAME) on every node to the interface of its cluster address",
                    {"init": _init(r)},
                )
            )
    return out


def _unanswered(entries: dict[str, list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """Ranks or launchers whose SYN to the store (or rendezvous endpoint) goes unanswered: a firewall, a route."""
    out = []
    for r in entries["ranks"] + entries["launchers"]:
        init = _init(r)
        if init.get("stage") not in ("store_connect", "rendezvous") or init.get("peer_state") != "syn-sent":
            continue
        peer = init.get("peer")
        port = str(peer).rpartition(":")[2]
        out.append(
            _culprit(
                "link",
                f"{r.get('node')}->{peer}",
                [r.get("node")],
                [r.get("rank")],
                f"{_who(r)} cannot reach the job's store at {peer}: its SYN goes unanswered (SYN-SENT)",
                f"a firewall drops tcp/{port} between {r.get('node')} and the master (nft/iptables on either), "
                "or no route to it: open the port, or set MASTER_ADDR to an address it reaches",
                {"init": init},
            )
        )
    return out


def _missing(
    entries: dict[str, list[dict[str, Any]]], world: int | None, expected: list[str]
) -> tuple[list[int], list[dict[str, Any]]]:
    arrived = {r.get("rank") for r in entries["ranks"] + entries["other_master"]}
    missing = sorted(set(range(world)) - arrived) if world else []
    culprits = []
    launchers = [e for e in entries["launchers"] if not e.get("master_differs")]
    nnodes = max((_number(_launch(e).get("nnodes", "").rpartition(":")[2]) or 0 for e in launchers), default=0)
    held = {_number(_launch(e).get("node_rank")) for e in launchers} | {
        _number(_launch(e).get("node_rank")) for e in entries["launchers"] if e.get("master_differs")
    }
    absent_nodes = sorted(set(range(nnodes)) - held) if nnodes else []
    if not missing and not absent_nodes:
        return missing, []
    waiting = [r for r in entries["ranks"] + launchers if _init(r).get("stage")]
    where = Counter(str(_init(r).get("stage")) for r in waiting)
    how = "; ".join(f"{n} at {s}" for s, n in where.most_common()) if where else "none found waiting"
    if absent_nodes:
        text = (
            f"node rank(s) {', '.join(map(str, absent_nodes[:16]))} of {nnodes} never joined the rendezvous: "
            f"torchrun's launchers found hold node rank(s) {', '.join(str(h) for h in sorted(held, key=str))} "
            f"({how})"
        )
    else:
        text = (
            f"rank(s) {', '.join(map(str, missing[:16]))} of {world} never arrived: "
            f"{len(entries['ranks'])} arrived ({how})"
        )
    if expected:
        text += f"; expected on {', '.join(expected[:16])} (its agent found no process of the job)"
    hint = (
        f"start the job on {', '.join(expected[:8])} (or check why it did not start there: its scheduler, its "
        "launcher's log)"
        if expected
        else "start the missing ranks (or check why their nodes did not start them), or lower the world size"
    )
    subject = f"node rank(s) {', '.join(map(str, absent_nodes[:16]))}" if absent_nodes else ""
    culprits.append(
        _culprit(
            "node",
            ", ".join(expected[:8]) or subject or f"rank(s) {', '.join(map(str, missing[:16]))}",
            expected,
            [] if absent_nodes else missing,
            text,
            hint,
            {"missing_ranks": missing[:64], "missing_node_ranks": absent_nodes[:64], "expected_nodes": expected[:64]},
        )
    )
    return missing, culprits


def _number(value: Any) -> int | None:
    text = str(value) if value is not None else ""
    return int(text) if text.isdigit() else None


def diagnose(
    entries: dict[str, list[dict[str, Any]]],
    world_size: int | None,
    pairs: list[dict[str, Any]],
    asked: list[str] | None,
    silent: list[str],
) -> dict[str, Any]:
    """The verdict and culprits of a job at init, and its ``init`` section (which ranks arrived, which did
    not, where each waits)."""
    world = (
        world_size
        or max(
            (r.get("world_size") or 0 for r in entries["ranks"] + entries["launchers"]),  # not another master's
            default=0,
        )
        or None
    )
    seen = {e.get("node") for group in entries.values() for e in group}
    expected = sorted(set(silent) | {n for n in asked or [] if n not in seen})
    master = _job_master(entries)
    arrived = {r.get("rank") for r in entries["ranks"]}
    # A rank of another master counts only as one this job misses, of its world size (not another job's).
    entries = {
        **entries,
        "other_master": [
            r
            for r in entries["other_master"]
            if r.get("rank") not in arrived and (not world or r.get("world_size") in (None, world))
        ],
    }
    missing, absent = _missing(entries, world, expected)
    if not entries["ranks"] and entries["launchers"]:
        missing = []  # at the rendezvous no rank exists yet: the node ranks missing say who is absent
    found: list[tuple[str, dict[str, Any]]] = [("application", c) for c in _port_in_use(entries)]
    found += [("application", c) for c in _other_master(entries, master)]
    found += [("network", c) for c in _unreachable_addresses(entries) + _unanswered(entries)]
    found += [
        ("network", c)
        for c in (
            _culprit(
                "link",
                f"{p['a']}<->{p['b']}",
                [p["a"], p["b"]],
                [],
                f"the live probe between {p['a']} and {p['b']} {p['status']} at {p.get('stage')} ({p.get('reason')})",
                p.get("hint") or "the path between those two nodes",
                {"pair": p},
            )
            for p in pairs
            if p.get("status") in ("failed", "timeout", "offline")
        )
    ]
    found += [("node", c) for c in absent]
    summary = _summary(entries, world, expected, missing, absent)
    if not found:
        stage = summary["stage"] or "init"
        return {
            "hung": True,
            "verdict": "unknown",
            "culprits": [],
            "why": f"every rank found waits at {stage} and no rank is missing, no port held, no peer unreachable "
            "seen: look at the ranks' own logs (TORCH_DISTRIBUTED_DEBUG=DETAIL, NCCL_DEBUG=INFO)",
            "init": summary,
        }
    return {"hung": True, "verdict": found[0][0], "culprits": [c for _, c in found], "init": summary}
