"""A hung job's diagnosis: what its ranks show, joined with a live probe of its nodes. Pure: no Django.

Input: each rank as its node's agent saw it (agents/hangs: rank, node, pid, state, where it
is: the collective its main thread waits in and the innermost frame of the job's own code,
whether it moved between two samples, its TCP connections), the job's world size, and the
live probe's pairs between the job's nodes (the sweep JSON's shape). Output: the verdict and
the culprits, most likely first, each with the evidence it rests on and a hint.

- ``node``: a rank is stopped, dead or in uninterruptible disk wait, or ranks are missing
  (their node's agent is silent, or they exited);
- ``application``: ranks wait in a collective that others never entered (those others are in
  the job's own code), or ranks wait in different collectives (a mismatch);
- ``network``: every rank waits in the same collective and a path is at fault (a live probe
  between two of the job's nodes fails, or a connection between ranks holds unacknowledged
  bytes it retransmits);
- ``progressing``: no rank is stuck in a collective: not hung;
- ``unknown``: no rank was found, or nothing above holds (and why).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

EXIT_CODES = {"progressing": 0, "network": 2, "application": 2, "node": 2, "unknown": 3}
BAD_PAIR_STATUSES = ("failed", "timeout", "offline")
DEAD_STATES = ("stopped", "zombie", "gone", "disk wait")


def _place(frame: dict[str, Any] | None) -> str:
    if not frame:
        return "code py-spy could not read"
    name = str(frame.get("file", "?")).rsplit("/", 1)[-1]
    return f"`{frame.get('function')}` ({name}:{frame.get('line')})"


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
) -> dict[str, Any]:
    """{"hung", "verdict", "culprits"} for one job, from its ranks' evidence and the live probe's pairs."""
    pairs, silent_nodes = pairs or [], silent_nodes or []
    if not ranks:
        why = "no rank of the job was found on any node"
        why += f" (nodes not heard from: {', '.join(silent_nodes)})" if silent_nodes else ""
        return {"hung": None, "verdict": "unknown", "culprits": [], "why": why}
    world_size = world_size or max((r.get("world_size") or 0 for r in ranks), default=0) or None
    found = _dead_ranks(ranks) + _missing(ranks, world_size, silent_nodes)
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
    ranks = [r for r in ranks if not r.get("stack_error")]
    stuck = _stuck(ranks)
    if not stuck:
        return {"hung": False, "verdict": "progressing", "culprits": []}
    ops = Counter(r["where"]["collective"] for r in stuck)
    waited, _ = ops.most_common(1)[0]
    elsewhere = [r for r in ranks if not (r.get("where") or {}).get("collective")]
    if elsewhere:
        culprits = [
            _culprit(
                "rank",
                f"rank {r.get('rank')}",
                [r.get("node", "?")],
                [r.get("rank")],
                f"{_who(r)} is inside {_place((r.get('where') or {}).get('frame'))}, not in `{waited}` where "
                + ("the other rank waits" if len(stuck) == 1 else f"the other {len(stuck)} ranks wait")
                + ": the job's code, not the network",
                "that rank's code never reaches the collective: a data loader, a lock, a loop, a branch "
                "only some ranks take",
                {"where": r.get("where"), "moved": r.get("moved"), "state": r.get("state")},
            )
            for r in elsewhere
        ]
        return {"hung": True, "verdict": "application", "culprits": culprits}
    if len(ops) > 1:
        per_op = {op: sorted(r.get("rank") or 0 for r in stuck if r["where"]["collective"] == op) for op in ops}
        text = "; ".join(f"rank(s) {', '.join(map(str, rs[:8]))} in `{op}`" for op, rs in per_op.items())
        culprit = _culprit(
            "mismatch",
            " vs ".join(f"`{op}`" for op in per_op),
            [r.get("node", "?") for r in stuck],
            [r.get("rank") for r in stuck],
            f"the ranks wait in different collectives: {text}",
            "ranks must call the same collectives in the same order (and process groups be created in the "
            "same order on every rank)",
            {"collectives": per_op},
        )
        return {"hung": True, "verdict": "application", "culprits": [culprit]}
    faults = _path_faults(ranks, pairs)
    if faults:
        return {"hung": True, "verdict": "network", "culprits": faults}
    return {
        "hung": True,
        "verdict": "unknown",
        "culprits": [],
        "why": f"every rank waits in `{waited}` and neither the live probe nor the ranks' connections show a "
        "fault: a rank stuck inside native code or a GPU kernel; enable the Flight Recorder (TORCH_FR_BUFFER_SIZE)",
    }
