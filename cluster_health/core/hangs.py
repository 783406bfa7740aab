"""A hung job's diagnosis: what its ranks show, joined with a live probe of its nodes. Pure: no Django.

Input: each rank as its node's agent saw it (agents/hangs: rank, node, pid, state, where it
is: the collective its main thread waits in and the innermost frame of the job's own code,
whether it moved between two samples, its TCP connections, and its Flight Recorder summary
when the job exposes one, and NCCL RAS's view when its port answered), the job's world size, and the
live probe's pairs between the job's nodes (the sweep JSON's shape). Output: the verdict and
the culprits, most likely first, each with the evidence it rests on and a hint.

- ``node``: a rank is stopped, dead or in uninterruptible disk wait, or ranks are missing
  (their node's agent is silent, or they exited), or NCCL RAS reports ranks missing (unresponsive,
  considered dead) or failing (an asynchronous error, an abort);
- ``application``: ranks wait in a collective that others never entered (those others are in
  the job's own code), or ranks wait in different collectives (a mismatch);
- ``network``: every rank waits in the same collective and a path is at fault (a live probe
  between two of the job's nodes fails, or a connection between ranks holds unacknowledged
  bytes it retransmits);
- ``progressing``: no rank is stuck in a collective: not hung;
- ``slow``: progressing, but held back by one rank every other waits for (``core.stragglers``);
- ``unknown``: no rank was found, or nothing above holds (and why).

Ranks are matched collective by collective: by the operation, process group and sequence number of
the first collective each entered and has not completed, from its Flight Recorder when it has one
(``position``), from its stack otherwise (the operation alone).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

from cluster_health.core import group_waits, init_hangs, stragglers

EXIT_CODES = {"progressing": 0, "slow": 1, "network": 2, "application": 2, "node": 2, "unknown": 3}
BAD_PAIR_STATUSES = ("failed", "timeout", "offline")
DEAD_STATES = ("stopped", "zombie", "gone", "disk wait")


def _place(frame: dict[str, Any] | None) -> str:
    if not frame:
        return "code py-spy could not read"
    name = str(frame.get("file", "?")).rsplit("/", 1)[-1]
    return f"`{frame.get('function')}` ({name}:{frame.get('line')})"


# What a stack shows that Flight Recorder never records: a rank there is still where its stack says.
UNRECORDED = ("init_process_group", "new_group")


def _number(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _collective(entry: Any) -> dict[str, Any] | None:
    """One Flight Recorder entry, as the answer names it: op, process group, sequence number."""
    if not isinstance(entry, dict):
        return None
    desc, pg = str(entry.get("desc") or "")[:80], _number(entry.get("pg"))
    group = desc if desc and desc != "undefined" else f"group {pg}"
    return {"op": str(entry.get("op"))[:80], "group": group, "pg": pg, "seq": _number(entry.get("seq"))}


def position(rank: dict[str, Any]) -> dict[str, Any]:
    """Where a rank is: {"collective", "frame"} from its stack, and, when its Flight Recorder was read,
    the collective from it instead (the first it entered and has not completed: "group", "seq"; none
    when it completed all it entered) with "last_completed" and "source": "flight recorder"."""
    where = dict(rank.get("where") or {"collective": None, "frame": None})
    if isinstance(rank.get("init"), dict):  # at init_process_group or its rendezvous (core/init_hangs.py)
        where["init"] = rank["init"]
    flight = rank.get("flight")
    if not isinstance(flight, dict) or "error" in flight or not isinstance(flight.get("groups"), list):
        return where
    pending = _collective(flight.get("pending"))
    if pending:
        where.update(collective=pending["op"], group=pending["group"], seq=pending["seq"])
    elif where.get("collective") not in UNRECORDED:
        where["collective"] = None
    where["last_completed"] = _collective(flight.get("last_completed"))
    where["source"] = "flight recorder"
    if pending and where["last_completed"] is None and "init" not in where:
        where["init"] = {"stage": "first_collective", "peer": None}  # past init, in the job's first collective
    return where


def _label(where: dict[str, Any]) -> str:
    """`all_reduce`, or with Flight Recorder `all_reduce` #12 on data."""
    if where.get("source") != "flight recorder" or where.get("seq") is None:
        return f"`{where.get('collective')}`"
    return f"`{where.get('collective')}` #{where['seq']} on {where.get('group')}"


def _who(rank: dict[str, Any]) -> str:
    return f"rank {rank.get('rank')} on {rank.get('node')}"


def _culprit(
    kind: str, subject: str, nodes: list[str], ranks: Sequence[int | None], text: str, hint: str, evidence: Any
) -> dict[str, Any]:
    return {
        "kind": kind,
        "subject": subject,
        "nodes": sorted(set(nodes)),
        "ranks": sorted(r for r in ranks if r is not None),
        "text": text,
        "hint": hint,
        "evidence": evidence,
    }


def _dead_ranks(ranks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for r in ranks:
        if r.get("state") in DEAD_STATES:
            what = {"stopped": "is stopped (SIGSTOP or a debugger)", "zombie": "has exited", "gone": "has exited"}.get(
                r["state"], "is in uninterruptible disk wait"
            )
            out.append(
                _culprit(
                    "rank",
                    f"rank {r.get('rank')}",
                    [r.get("node", "?")],
                    [r.get("rank")],
                    f"{_who(r)} {what}: the other ranks wait for it",
                    "look at that process first (its node's dmesg, a storage stall, a debugger attached); "
                    "restart the job once it is understood",
                    {"pid": r.get("pid"), "state": r["state"]},
                )
            )
    return out


def _ras(ranks: list[dict[str, Any]], blamed: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """NCCL RAS's missing ranks (unresponsive, considered dead) and ranks reporting an error or an abort,
    each communicator once (every node's RAS answers for the whole job)."""
    comms: dict[str, dict[str, Any]] = {}
    for r in ranks:
        view = r.get("ras")
        if isinstance(view, dict) and isinstance(view.get("communicators"), list):
            comms.update({str(c.get("hash")): c for c in view["communicators"] if isinstance(c, dict)})
    node_of = {(r.get("pid")): r.get("node") for r in ranks}
    named = {c["evidence"].get("pid") for c in blamed if isinstance(c.get("evidence"), dict)}
    out = []
    for comm_hash, comm in sorted(comms.items()):
        where = f"communicator {comm_hash[:24]} ({comm.get('size')} ranks)"
        listed = [(e, True) for e in comm.get("missing") or []] + [(e, False) for e in comm.get("failing") or []]
        for e, missing in listed:
            if not isinstance(e, dict) or e.get("pid") in named:
                continue
            node = node_of.get(e.get("pid")) or str(e.get("host"))[:64]
            if missing:
                what = "considered dead" if e.get("dead") else "unresponsive" if e.get("unresponsive") else "missing"
                text = f"NCCL RAS reports rank {e.get('rank')} of {where} on {node} (pid {e.get('pid')}) {what}"
                hint = (
                    "that process or its node is gone or frozen: check the node (dmesg, its GPU, its agent) "
                    "and restart the job without it"
                )
            else:
                what = "aborted its communicator" if e.get("abort") else f"reports NCCL error {e.get('async_error')}"
                text = f"NCCL RAS: rank {e.get('rank')} of {where} on {node} {what}"
                hint = "the communicator is broken on that rank: its NCCL log (NCCL_DEBUG=WARN) names the failing peer"
            evidence = {"ras": e, "communicator": comm_hash[:24], "pid": e.get("pid")}
            out.append(
                _culprit("rank", f"rank {e.get('rank')}", [node], [_number(e.get("rank"))], text, hint, evidence)
            )
    return out


def _missing(ranks: list[dict[str, Any]], world_size: int | None, silent_nodes: list[str]) -> list[dict[str, Any]]:
    seen = {r.get("rank") for r in ranks}
    missing = sorted(set(range(world_size)) - seen) if world_size else []
    if not missing and not silent_nodes:
        return []
    where = f"; nodes not heard from: {', '.join(silent_nodes)}" if silent_nodes else ""
    return [
        _culprit(
            "node",
            ", ".join(silent_nodes) or f"rank(s) {', '.join(map(str, missing[:16]))}",
            silent_nodes,
            missing,
            f"{len(missing)} of {world_size} ranks were found on no node{where}",
            "a rank that exited or a node whose agent is silent: check those nodes first",
            {"missing_ranks": missing[:64], "silent_nodes": silent_nodes},
        )
    ]


def _stuck(ranks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [r for r in ranks if (r.get("where") or {}).get("collective") and not r.get("moved")]


def _path_faults(ranks: list[dict[str, Any]], pairs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for p in pairs:
        if p.get("status") in BAD_PAIR_STATUSES:
            out.append(
                _culprit(
                    "link",
                    f"{p['a']}<->{p['b']}",
                    [p["a"], p["b"]],
                    [r.get("rank") for r in ranks if r.get("node") in (p["a"], p["b"])],
                    f"the live probe between {p['a']} and {p['b']} {p['status']}"
                    + (f" at {p.get('stage')} ({p.get('reason')})" if p.get("stage") else ""),
                    p.get("hint") or "the path between those two nodes: firewall, routes, the NIC or cable",
                    {"pair": p},
                )
            )
    for r in ranks:
        for c in r.get("connections") or []:
            if (c.get("unacked_bytes") or 0) > 0 and (c.get("retransmits") or 0) > 0:
                out.append(
                    _culprit(
                        "link",
                        f"{r.get('node')}->{c.get('peer')}",
                        [r.get("node", "?")],
                        [r.get("rank")],
                        f"{_who(r)} has {c['unacked_bytes']} bytes unacknowledged to {c.get('peer')} after "
                        f"{c['retransmits']} retransmissions",
                        "the path from that node to the peer drops traffic: a link, a switch port, MTU",
                        {"connection": c},
                    )
                )
    return out


def diagnose(
    ranks: list[dict[str, Any]],
    world_size: int | None = None,
    pairs: list[dict[str, Any]] | None = None,
    silent_nodes: list[str] | None = None,
    nodes: list[str] | None = None,
) -> dict[str, Any]:
    """{"hung", "verdict", "culprits"} for one job, from its ranks' evidence and the live probe's pairs;
    with "init" (core/init_hangs.py) when it waits at init_process_group or its rendezvous. ``ranks`` may
    hold a report's other entries too (launchers, other-master ranks, port holders); ``nodes``: the nodes
    asked, where a missing rank is looked for."""
    pairs, silent_nodes = pairs or [], silent_nodes or []
    parts = init_hangs.split(ranks)
    ranks = parts["ranks"]
    if not _dead_ranks(ranks) and init_hangs.at_init(parts):
        return init_hangs.diagnose(parts, world_size, pairs, nodes, silent_nodes)
    if not ranks:
        why = "no rank of the job was found on any node"
        why += f" (nodes not heard from: {', '.join(silent_nodes)})" if silent_nodes else ""
        return {"hung": None, "verdict": "unknown", "culprits": [], "why": why}
    world_size = world_size or max((r.get("world_size") or 0 for r in ranks), default=0) or None
    dead = _dead_ranks(ranks)
    found = dead + _ras(ranks, dead) + _missing(ranks, world_size, silent_nodes)
    if found:
        return {"hung": True, "verdict": "node", "culprits": found}
    unread = [r for r in ranks if r.get("stack_error")]
    if len(unread) == len(ranks):
        return {
            "hung": None,
            "verdict": "unknown",
            "culprits": [],
            "why": f"no rank's stack could be read: {unread[0]['stack_error']}",
        }
    ranks = [{**r, "where": position(r)} for r in ranks if not r.get("stack_error")]
    stuck = _stuck(ranks)
    if not stuck:  # progressing, or held back by one rank (core/stragglers.py)
        return stragglers.assess(ranks, pairs) or {"hung": False, "verdict": "progressing", "culprits": []}
    # Matched by op alone unless every stuck rank's Flight Recorder names its group and sequence number.
    recorded = all(r["where"].get("source") == "flight recorder" for r in stuck)
    ops = Counter(_label(r["where"]) if recorded else f"`{r['where']['collective']}`" for r in stuck)
    waited, _ = ops.most_common(1)[0]
    elsewhere = [r for r in ranks if not (r.get("where") or {}).get("collective")]
    if elsewhere:
        culprits = [
            _culprit(
                "rank",
                f"rank {r.get('rank')}",
                [r.get("node", "?")],
                [r.get("rank")],
                f"{_who(r)} is inside {_place((r.get('where') or {}).get('frame'))}, not in {waited} where "
                + ("the other rank waits" if len(stuck) == 1 else f"the other {len(stuck)} ranks wait")
                + _finished(r["where"])
                + ": the job's code, not the network",
                "that rank's code never reaches the collective: a data loader, a lock, a loop, a branch "
                "only some ranks take",
                {"where": r.get("where"), "moved": r.get("moved"), "state": r.get("state")},
            )
            for r in elsewhere
        ]
        return {"hung": True, "verdict": "application", "culprits": culprits}
    if len(ops) > 1:
        key = {id(r): _label(r["where"]) if recorded else f"`{r['where']['collective']}`" for r in stuck}
        per_op = {op: sorted(r.get("rank") or 0 for r in stuck if key[id(r)] == op) for op in ops}
        text = "; ".join(f"rank(s) {', '.join(map(str, rs[:8]))} in {op}" for op, rs in per_op.items())
        groups = sorted({str(r["where"].get("group")) for r in stuck}) if recorded else []
        culprit = _culprit(
            "mismatch",
            " vs ".join(per_op),
            [r.get("node", "?") for r in stuck],
            [r.get("rank") for r in stuck],
            f"the ranks wait in different collectives: {text}",
            "ranks must call the same collectives in the same order (and process groups be created in the "
            "same order on every rank)",
            {"collectives": per_op, "groups": groups},
        )
        return {"hung": True, "verdict": "application", "culprits": [culprit]}
    if not recorded and (per_group := group_waits.split(stuck)):  # different groups, by the job's own names
        return {"hung": True, "verdict": "application", "culprits": [group_waits.culprit(per_group, waited, stuck)]}
    faults = _path_faults(ranks, pairs)
    if faults:
        return {"hung": True, "verdict": "network", "culprits": faults}
    return {
        "hung": True,
        "verdict": "unknown",
        "culprits": [],
        "why": f"every rank waits in {waited} and neither the live probe nor the ranks' connections show a "
        "fault: a rank stuck inside native code or a GPU kernel"
        + ("" if recorded else "; enable the Flight Recorder (TORCH_FR_BUFFER_SIZE) and its worker server"),
    }


def _finished(where: dict[str, Any]) -> str:
    done = where.get("last_completed")
    return (
        f" (the last collective it completed: {_label({**done, 'collective': done['op'], 'source': where['source']})})"
        if done
        else ""
    )
