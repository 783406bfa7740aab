"""A pair's evidence from its two halves, and the gray failures named from it. Pure: no Django.

Each half reports what its node saw (agents/evidence.py): the TCP counters of its
namespace during the probe, the sockets to the peer with unacknowledged data, the
MTU of the interface it used, the largest message that completed and the one in
flight, whether it listened or connected. The pair's evidence keeps both sides by
role (``a`` is rank 0, which hosts the store; ``b`` connects to it) plus the
connections tried, in the words the culprit inference reads.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from agents.evidence import human_bytes

# Retransmitting this share of its segments (with enough segments sent to mean it) makes a node's link lossy.
LOSSY_RETRANS_PCT = 1.0
LOSSY_MIN_SEGMENTS = 200
# Stages after which a timeout with messages already through is a size stall rather than a dead peer.
STALL_STAGES = ("bandwidth",)
HALF_KEYS = (
    "load",
    "interface",
    "mtu",
    "peer_address",
    "store",
    "transport",
    "largest_ok_bytes",
    "size_in_flight",
    "tcp",
    "sockets",
    "stack",
    "stage_times",
)


def _side(half: dict[str, Any] | None) -> dict[str, Any] | None:
    if half is None:
        return None
    ev = half.get("evidence") or {}
    return {"node": half.get("node") or ev.get("node"), **{k: ev[k] for k in HALF_KEYS if k in ev}}


def connections(a: str, b: str, side_a: dict[str, Any] | None, side_b: dict[str, Any] | None) -> list[dict[str, Any]]:
    """The connections the probe tried, as {from, to, step, ok}; ok None where the direction is unknown.

    The store: ``b`` connects to ``a`` (rank 0 listens). Gloo/NCCL: both listen and one of
    them dials, which one depends on their ephemeral ports, so a failure there blames no direction.
    """
    out = []
    store_b = (side_b or {}).get("store") or {}
    store_a = (side_a or {}).get("store") or {}
    if store_b.get("role") == "connect":
        out.append({"from": b, "to": a, "step": "store", "ok": bool(store_b.get("connected"))})
    elif store_a.get("role") == "listen" and store_a.get("connected") is True:
        # The listener can prove that b connected, never that b tried and failed: b may never have
        # dialled (it timed out waiting for the port) or never run (its half is missing).
        out.append({"from": b, "to": a, "step": "store", "ok": True})
    tr = [s["transport"] for s in (side_a, side_b) if s and s.get("transport")]
    if tr:
        ok = all(t.get("connected") for t in tr)
        out.append({"from": a, "to": b, "step": "transport", "ok": True if ok else None})
    return out


def pair_evidence(half_a: dict[str, Any] | None, half_b: dict[str, Any] | None) -> dict[str, Any] | None:
    """Both sides' evidence by role, and the connections tried; None when neither half carries any."""
    side_a, side_b = _side(half_a), _side(half_b)
    if not any(h and h.get("evidence") for h in (half_a, half_b)):
        return None
    a = (side_a or {}).get("node") or "a"
    b = (side_b or {}).get("node") or "b"
    largest = [int(s["largest_ok_bytes"]) for s in (side_a, side_b) if s and s.get("largest_ok_bytes")]
    flight = [int(s["size_in_flight"]) for s in (side_a, side_b) if s and s.get("size_in_flight")]
    return {
        "a": side_a,
        "b": side_b,
        "connections": connections(a, b, side_a, side_b),
        "largest_ok_bytes": min(largest) if largest else None,
        "stalled_bytes": min(flight) if flight else None,
    }


def retrans(side: dict[str, Any] | None) -> tuple[float, int]:
    """(percent of segments retransmitted, segments sent) of one side during the probe."""
    tcp = (side or {}).get("tcp") or {}
    return float(tcp.get("retrans_pct") or 0.0), int(tcp.get("OutSegs") or 0)


def _stuck(side: dict[str, Any] | None) -> bool:
    """Whether a side had data to the peer unacknowledged and already retransmitted (not merely in flight)."""
    return any(s.get("tx_queue") and s.get("retransmits") for s in (side or {}).get("sockets") or [])


def size_stall(result: Mapping[str, Any], ev: dict[str, Any] | None) -> dict[str, Any] | None:
    """The result renamed ``size_stall`` when smaller messages passed and a larger one never completed.

    A peer that died mid-transfer looks alike from one side; what tells a stall is a
    socket to the peer whose bytes stay unacknowledged after retransmissions.
    """
    if not ev or result["status"] != "timeout" or result.get("stage") not in STALL_STAGES:
        return None
    largest, stalled = ev.get("largest_ok_bytes"), ev.get("stalled_bytes")
    if not largest or not stalled or stalled <= largest:
        return None
    sides = [ev.get("a"), ev.get("b")]
    # A dead peer resets or closes the connection; bytes that stay unacknowledged through
    # retransmissions are bytes the path loses.
    if not any(_stuck(s) for s in sides):
        return None
    a, b = (s or {} for s in sides)
    mtus = f"{a.get('node')} (MTU {a.get('mtu') or '?'}) and {b.get('node')} (MTU {b.get('mtu') or '?'})"
    if a.get("mtu") and b.get("mtu") and a["mtu"] != b["mtu"]:
        fix = "align the MTU on the path"
    else:
        fix = (
            "a device on the path drops frames that large (a path-MTU black hole): align the MTU of the hosts "
            "and the path, or allow the ICMP 'fragmentation needed' messages"
        )
    hint = (
        f"transfers of {human_bytes(stalled)} and more stall between {mtus} while {human_bytes(largest)} "
        f"completed: {fix}"
    )
    return {**result, "reason": "size_stall", "hint": hint}


def lossy(result: Mapping[str, Any], ev: dict[str, Any] | None) -> dict[str, Any] | None:
    """The result ``degraded``/``lossy`` when a side retransmitted a share of its segments though the pair passed."""
    if not ev or result["status"] != "ok":
        return None
    worst = max((s for s in (ev.get("a"), ev.get("b")) if s), key=lambda s: retrans(s)[0], default=None)
    pct, sent = retrans(worst)
    if pct < LOSSY_RETRANS_PCT or sent < LOSSY_MIN_SEGMENTS:
        return None
    other = ev["b"] if worst is ev.get("a") else ev.get("a")
    if worst is None:
        return None
    hint = (
        f"{worst.get('node')} retransmitted {pct:.1f} % of its {sent} segments during the probe with "
        f"{(other or {}).get('node')}: packets are lost on the way; check the cable or optic"
    )
    return {**result, "status": "degraded", "reason": "lossy", "hint": hint}


def summary(ev: dict[str, Any] | None) -> dict[str, Any] | None:
    """The pair's evidence as the sweep JSON carries it: per side the numbers, not the socket tables."""
    if not ev:
        return None
    out: dict[str, Any] = {
        "largest_ok_bytes": ev.get("largest_ok_bytes"),
        "stalled_bytes": ev.get("stalled_bytes"),
        "connections": ev.get("connections") or [],
        # What the pair was compared with in its sweep, and what the confirmation pass saw (sweeps/confirming.py).
        "peers": ev.get("peers"),
        "confirmation": ev.get("confirmation"),
    }
    for role in ("a", "b"):
        side = ev.get(role)
        if not side:
            out[role] = None
            continue
        tcp = side.get("tcp") or {}
        out[role] = {
            "node": side.get("node"),
            "interface": side.get("interface"),
            "mtu": side.get("mtu"),
            "store": (side.get("store") or {}).get("role"),
            "retrans_pct": tcp.get("retrans_pct"),
            "retrans_segs": tcp.get("RetransSegs"),
            "out_segs": tcp.get("OutSegs"),
            "out_rsts": tcp.get("OutRsts"),
            "in_errs": tcp.get("InErrs"),
            "stuck_sockets": sum(1 for s in side.get("sockets") or [] if s.get("tx_queue")),
            "stage_times": side.get("stage_times"),
            "load": side.get("load"),
            "stack": side.get("stack"),
        }
    return out
