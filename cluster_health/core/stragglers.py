"""A job that progresses, held back by one rank: the straggler everyone waits for. Pure: no Django.

Called by ``core.hangs.diagnose`` where its verdict would be ``progressing`` (no rank stuck). Two
sources of the steps, the first that speaks wins:

- **Flight Recorder** (each rank's ``flight.recent``: its last completed collectives with the time it
  enqueued each, ``agents/hangs/flight.py``): for one collective (process group, sequence number) every
  rank enqueues it, and the one that enqueues last is the one the others wait for. Per step, the
  lateness is the time from the latest other rank's enqueue to that rank's;
- **sampled stacks** (each rank's ``samples``: where it was in each of the inspect's samples): in every
  sample, the same one rank is in the job's own code while every other rank waits in a collective.
  The lateness per step is not measured then.

Quiet when healthy: a rank is named only when it is last in at least ``LAST_SHARE`` of at least
``MIN_STEPS`` steps recorded by every rank, and its median lateness is at least ``MIN_LATENESS_S`` and
``JITTER_FACTOR`` times the spread of the other ranks' arrivals (the job's own jitter); last in
``LINK_SHARE`` of them is enough when the live probe shows its node's or another node's link far below
the others (a slow link, not a slow rank: in a ring the rank after it waits, and that alternates). Flight Recorder's
enqueue times are each node's wall clock: ranks on different nodes compare only as well as their clocks
agree (NTP keeps them within milliseconds; ``MIN_LATENESS_S`` is well above that); where entries carry
completion times (NCCL), the named rank must also be the one that waits least.

With the live probe's pairs between the job's nodes, what holds the rank back: its node's link (the
node's pairs well below the pairs that do not touch it, in busbw or latency) or its node (the node's CPU
busy while the probe measured, from the halves' ``load``, and heavier than the other nodes), else its own
code. A rank whose node's link is slow may not be the last to enqueue (in a ring the rank after it is),
so a node whose every pair is far below the others' is named too, when the steps show a straggler.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from statistics import median
from typing import Any

from cluster_health.core import judging

RECENT_STEPS = 64  # the steps compared (the last ones every rank recorded)
MIN_STEPS = 8
LAST_SHARE = 0.75
# With a link the live probe finds far slower than the others, a rank last in this share of the steps is
# enough: a slow link delays the rank after it in a ring, and which rank that is alternates more.
LINK_SHARE = 0.5
MIN_LATENESS_S = 0.05
JITTER_FACTOR = 3.0
MIN_SAMPLES = 2
SLOW_LINK_SHARE = 0.5  # a node's pairs below this share of the other pairs' median busbw
SLOW_LATENCY_FACTOR = 3.0  # or above this many times their median latency
CPU_PARTS = ("cpu_pressure", "sched_wait", "cpu_steal")


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 2**62 else None


def _steps(rank: dict[str, Any]) -> dict[tuple[int, int, str], tuple[int, int | None]]:
    """A rank's recent completed collectives: (pg, seq, op) -> (enqueued ns, completed ns or None)."""
    flight = rank.get("flight")
    recent = flight.get("recent") if isinstance(flight, dict) else None
    out: dict[tuple[int, int, str], tuple[int, int | None]] = {}
    for e in recent if isinstance(recent, list) else []:
        if not isinstance(e, dict):
            continue
        pg, seq, created = _int(e.get("pg")), _int(e.get("seq")), _int(e.get("created_ns"))
        if pg is None or seq is None or not created:
            continue
        out[(pg, seq, str(e.get("op"))[:80])] = (created, _int(e.get("completed_ns")) or None)
    return out


def from_flight(ranks: Sequence[dict[str, Any]], min_share: float = LAST_SHARE) -> dict[str, Any] | None:
    """The straggler the Flight Recorders show: {"rank", "lateness_s", "last_in", "steps", "jitter_s",
    "source"}, or None (too few steps every rank recorded, no consistent last rank)."""
    per_rank: dict[int, dict[tuple[int, int, str], tuple[int, int | None]]] = {
        r["rank"]: _steps(r) for r in ranks if isinstance(r.get("rank"), int)
    }
    if len(per_rank) < 2 or not all(per_rank.values()):
        return None
    shared = set.intersection(*(set(s) for s in per_rank.values()))
    keys = sorted(shared, key=lambda k: max(per_rank[r][k][0] for r in per_rank))[-RECENT_STEPS:]
    if len(keys) < MIN_STEPS:
        return None
    last = [max(per_rank, key=lambda r: per_rank[r][k][0]) for k in keys]
    culprit, _ = max(((r, last.count(r)) for r in set(last)), key=lambda x: x[1])
    others = [r for r in per_rank if r != culprit]
    margins, spreads = [], []
    for k in keys:
        times = [per_rank[r][k][0] for r in others]
        margins.append((per_rank[culprit][k][0] - max(times)) / 1e9)
        spreads.append((max(times) - min(times)) / 1e9)
    share = last.count(culprit) / len(keys)
    lateness, jitter = median(margins), median(spreads)
    found: dict[str, Any] = {
        "rank": culprit,
        "lateness_s": round(lateness, 4),
        "last_in": last.count(culprit),
        "steps": len(keys),
        "jitter_s": round(jitter, 4),
        "source": "flight recorder",
    }
    if share < min_share or lateness < MIN_LATENESS_S or lateness < JITTER_FACTOR * jitter:
        return None
    waits = {r: [c - e for k in keys if (c := per_rank[r][k][1]) and c >= (e := per_rank[r][k][0])] for r in per_rank}
    if all(len(w) == len(keys) for w in waits.values()):  # completion times (NCCL): it must wait least
        wait = {r: round(median(w) / 1e9, 4) for r, w in waits.items()}
        found["wait_s"] = wait
        if min(wait, key=lambda r: wait[r]) != culprit:
            return None
    return found


def candidate(ranks: Sequence[dict[str, Any]]) -> dict[str, Any] | None:
    """A straggler the steps suggest (last in LINK_SHARE of them), which a slow link in the live probe
    confirms: what makes the diagnosis measure each pair's busbw."""
    return from_flight(ranks, LINK_SHARE) or from_stacks(ranks)


def from_stacks(ranks: Sequence[dict[str, Any]]) -> dict[str, Any] | None:
    """The straggler the sampled stacks show: in each of at least MIN_SAMPLES samples the same one rank in
    its own code while every other rank waits in a collective; None otherwise."""
    samples: dict[int, list[Any]] = {
        r["rank"]: s for r in ranks if isinstance(r.get("rank"), int) and isinstance(s := r.get("samples"), list)
    }
    if len(samples) < 2 or len(samples) < len(ranks) or not all(len(s) >= MIN_SAMPLES for s in samples.values()):
        return None
    count = min(len(s) for s in samples.values())
    outside = []
    for i in range(count):
        out = [r for r, s in samples.items() if not (isinstance(s[i], dict) and s[i].get("collective"))]
        seen = samples[out[0]][i] if len(out) == 1 else None
        if not (isinstance(seen, dict) and seen.get("frame")):  # one rank, seen in its own code
            return None
        outside.append(out[0])
    if len(set(outside)) != 1:
        return None
    culprit = outside[0]
    frame = samples[culprit][-1].get("frame") if isinstance(samples[culprit][-1], dict) else None
    return {"rank": culprit, "lateness_s": None, "last_in": count, "steps": count, "frame": frame, "source": "stacks"}


def _cpu(node: str, pairs: Sequence[Mapping[str, Any]]) -> float | None:
    """The node's heaviest CPU load score over the probe's halves it measured (None without any)."""
    scores = []
    for p in pairs:
        ev = p.get("evidence") or {}
        for role in ("a", "b"):
            side = ev.get(role) if isinstance(ev, Mapping) else None
            if isinstance(side, Mapping) and (side.get("node") or p.get(role)) == node:
                parts = judging.side_parts(side.get("load"), side.get("interface"))
                scores += [v for name, v in parts.items() if name in CPU_PARTS]
    return max(scores) if scores else None


def _figure(value: Any) -> float | None:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value > 0
    return float(value) if ok else None


# Pairs whose busbw is what their link moved in the live probe: a ``transient`` pair too (slow at its first
# look, not slow enough at its second to be acted on by a sweep), since the job was slow at that moment: on a
# shaped link the first look's retransmits can make it ``lossy`` and the second look not, and the link's
# figures, far below the others', were then left out and the rank named instead.
LINK_FIGURES = (*judging.MEASURED, "transient")


def slow_link(node: str, pairs: Sequence[Mapping[str, Any]]) -> dict[str, Any] | None:
    """The node's pairs against the pairs that do not touch it: {"busbw_gbps", "others_busbw_gbps",
    "latency_us", "others_latency_us", "stalled"} when every pair of the node is far below (busbw) or far
    above (latency) the others' median, or stalled in the bandwidth stage (it connected and ran the
    collective, but moved too little data in its time); None otherwise, or with no other pair to compare with."""
    measured = [p for p in pairs if p.get("status") in LINK_FIGURES]
    stalled = [p for p in pairs if p.get("status") in ("failed", "timeout") and p.get("stage") == "bandwidth"]
    mine = [p for p in measured if node in (p.get("a"), p.get("b"))]
    mine_stalled = [p for p in stalled if node in (p.get("a"), p.get("b"))]
    rest = [p for p in measured if node not in (p.get("a"), p.get("b"))]
    if not (mine or mine_stalled) or not rest or len(mine_stalled) < len(stalled):
        return None  # nothing of its own, nothing to compare with, or other nodes' pairs stalled too

    def figures(ps: Sequence[Mapping[str, Any]], key: str) -> list[float]:
        return [v for p in ps if (v := _figure(p.get(key))) is not None]

    mb, rb = figures(mine, "busbw_gbps"), figures(rest, "busbw_gbps")
    ml, rl = figures(mine, "latency_us"), figures(rest, "latency_us")
    slow_bw = len(mb) == len(mine) and bool(rb) and (not mb or max(mb) < SLOW_LINK_SHARE * median(rb))
    slow_lat = bool(mine) and len(ml) == len(mine) and bool(rl) and min(ml) > SLOW_LATENCY_FACTOR * median(rl)
    if not (slow_bw or slow_lat):
        return None
    return {
        "busbw_gbps": round(median(mb), 4) if mb else None,
        "others_busbw_gbps": round(median(rb), 4) if rb else None,
        "latency_us": round(median(ml), 1) if ml else None,
        "others_latency_us": round(median(rl), 1) if rl else None,
        "stalled": len(mine_stalled),
    }


def _busy_node(node: str, nodes: Sequence[str], pairs: Sequence[Mapping[str, Any]]) -> float | None:
    """The node's CPU load score when it was busy and heavier than every other node's, else None."""
    mine = _cpu(node, pairs)
    others = [s for n in nodes if n != node and (s := _cpu(n, pairs)) is not None]
    if mine is None or mine < judging.BUSY or any(mine < s + judging.HEAVIER for s in others):
        return None
    return mine


def _seconds(s: float) -> str:
    return f"{s * 1000:.0f} ms" if s < 1 else f"{s:.2f} s"


def assess(ranks: Sequence[dict[str, Any]], pairs: Sequence[Mapping[str, Any]]) -> dict[str, Any] | None:
    """The ``slow`` answer ({"hung": False, "verdict": "slow", "culprits"}) for a progressing job held back by
    one rank, with what holds it back from the live probe; None when no rank is consistently waited for.

    The culprit, most likely first: a node whose every link is far below the others' (``link``: whoever
    enqueues last, a ring waits for that link), else the rank's node when its CPU was busy (``node``), else
    the rank itself (``rank``: its own code is slower)."""
    strict = from_flight(ranks) or from_stacks(ranks)
    found = strict or candidate(ranks)
    if found is None:
        return None
    rank = next((r for r in ranks if r.get("rank") == found["rank"]), {})
    node = str(rank.get("node") or "?")
    nodes = sorted({str(r.get("node")) for r in ranks if r.get("node")})
    who = f"rank {found['rank']} on {node}"
    if found["lateness_s"] is not None:
        late = (
            f"{who} enqueues last in {found['last_in']} of the last {found['steps']} collectives, "
            f"{_seconds(found['lateness_s'])} after the others a step (median; their own spread "
            f"{_seconds(found['jitter_s'])}; Flight Recorder)"
        )
    else:
        late = (
            f"{who} is in its own code in each of {found['steps']} samples while every other rank waits in a "
            "collective (stacks; enable the Flight Recorder for its lateness per step)"
        )
    evidence: dict[str, Any] = {"steps": found, "where": rank.get("where")}
    culprits: list[dict[str, Any]] = []
    for slow_node in nodes:
        figures = slow_link(slow_node, pairs)
        if figures is None:
            continue
        on_it = sorted(r["rank"] for r in ranks if r.get("node") == slow_node and isinstance(r.get("rank"), int))
        culprits.append(
            _culprit(
                "link",
                f"{slow_node}'s link",
                slow_node,
                on_it,
                f"the job progresses slowly, held back by {slow_node}'s link: in the live probe "
                f"{_link_words(figures)}; {late}",
                "that node's path: its NIC, cable or switch port, a rate limit or a shaped queue; fix it or move "
                "the job off the node",
                {**evidence, "link": figures},
            )
        )
    if culprits:
        return {"hung": False, "verdict": "slow", "culprits": culprits}
    if strict is None:  # last in too few steps to name the rank itself
        return None
    busy = _busy_node(node, nodes, pairs)
    if busy is not None:
        culprits.append(
            _culprit(
                "node",
                node,
                node,
                [found["rank"]],
                f"the job progresses slowly, held back by {node}: its CPU was busy ({busy:.0%} load while the "
                f"live probe measured, more than the other nodes'); {late}",
                "other work on that node takes the rank's CPU: find it (top, the node's other jobs) or move the rank",
                {**evidence, "cpu_load": round(busy, 3)},
            )
        )
    else:
        looked = "its node's links and CPU look like the others' in the live probe" if len(nodes) > 1 else ""
        where = _frame(found.get("frame") or (rank.get("where") or {}).get("frame"))
        culprits.append(
            _culprit(
                "rank",
                f"rank {found['rank']}",
                node,
                [found["rank"]],
                f"the job progresses, held back by {late}; "
                + (f"{looked}: " if looked else "")
                + f"its own code is slower (now in {where})",
                "that rank does more work, or waits on its own input (a data loader, storage, a lock): profile it",
                evidence,
            )
        )
    return {"hung": False, "verdict": "slow", "culprits": culprits}


def _culprit(
    kind: str, subject: str, node: str, ranks: list[int], text: str, hint: str, evidence: Any
) -> dict[str, Any]:
    return {
        "kind": kind,
        "subject": subject,
        "nodes": [node],
        "ranks": ranks,
        "text": text,
        "hint": hint,
        "evidence": evidence,
    }


def _link_words(f: Mapping[str, Any]) -> str:
    words = [f"{f['stalled']} of its pairs stalled in the bandwidth stage"] if f.get("stalled") else []
    if f.get("busbw_gbps") is not None and f.get("others_busbw_gbps") is not None:
        words.append(f"busbw {f['busbw_gbps']:.3g} GB/s against {f['others_busbw_gbps']:.3g} GB/s between the others")
    if f.get("latency_us") is not None and f.get("others_latency_us") is not None:
        words.append(f"latency {f['latency_us']:.0f} us against {f['others_latency_us']:.0f} us")
    return ", ".join(words)


def _frame(frame: Any) -> str:
    if not isinstance(frame, Mapping):
        return "code py-spy could not read"
    name = str(frame.get("file", "?")).rsplit("/", 1)[-1]
    return f"`{frame.get('function')}` ({name}:{frame.get('line')})"
