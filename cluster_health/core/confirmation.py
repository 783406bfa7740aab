"""The confirmation pass: slow next to its peers, what to probe again, and what the second look decided. Pure.

A pair judged bad once is not yet a fault: a busy host, a burst of someone else's
traffic or a probe scheduled beside a backup makes a healthy link look slow, and a
tool that drains nodes must not act on that. So when a sweep's planned rounds end,
every pair that is not ``ok`` is probed again, and each side of it with a partner
that was healthy in this sweep. The pair then keeps both outcomes:

- bad again: ``confirmed``, its status stays and the culprit rules act on it;
- fine the second time: ``transient``, reported, never acted on;
- slow each time while its node was busy with other traffic or work: ``contended``,
  reported with the figures, never acted on; so is a pair slow again only in a second look
  measured under heavier load than the first (core/judging.py: that confirms nothing by itself).

The partners tell node from link: a node that fails with its healthy partner too is
the node; a pair whose two sides each work with someone else is the link.

Pairs are dicts with ``a``, ``b``, ``status``, ``stage``, ``reason``, ``hint``,
``busbw_gbps``, ``sizes``, ``evidence`` and ``round`` (cluster_health.sweeps.findings).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from typing import Any

from cluster_health import vocabulary
from cluster_health.core import culprits, fleet, judging

BAD = vocabulary.BAD_STATUSES
SLOW_CODES = ("slow_node", "slow_link", "segment")  # outlier findings whose pairs are slow next to their peers
# Pairs suspect for their speed alone, which load can explain (a lossy pair is suspect for its retransmissions).
SLOW_REASONS = ("below_baseline", "below_peers")
MAX_ROUNDS = 3  # extra rounds a confirmation pass may take, at most
PER_NODE = 3  # probes one node takes part in during the pass, at most (a dead node's N-1 pairs are not all redone)
PARTNERS = 1  # healthy partners each side of a suspect pair is probed with
# A slow pair is slow again when its second busbw is under this share of what it was compared with
# the first time: a second look halfway to normal is not normal.
SLOW_AGAIN_RATIO = 0.5
# A side was busy while it measured (``busy``): other bytes on its interface at this share of the probe's
# own (retransmissions and headers stay well under it), or this share of its CPU time stolen by the hypervisor.
CONTENDED_NIC_SHARE = 0.5
CONTENDED_STEAL = 0.1
MAX_TOLD = 50  # confirmation findings, at most (the pairs' own rows say the rest)


def link(a: str, b: str) -> str:
    return f"{a}<->{b}"


def key(a: str, b: str) -> tuple[str, str]:
    return (a, b) if a <= b else (b, a)


def peer_marks(
    pairs: list[dict[str, Any]], pattern: str | None = None, declared: Mapping[str, str] | None = None
) -> dict[tuple[str, str], dict[str, Any]]:
    """Pairs that passed as ``ok`` but run far below the same sweep's links of the same kind: their new fields.

    The comparison is culprits.outliers' (a slow node against the links without it, a slow
    segment against the links inside its groups, a single link against the rest), so the
    cell, the pair's hint and the finding name the same figures. Needs no history: a
    first sweep of a new deployment judges its links this way.

    At a saturated moment (judging.saturated: the pair and the sweep's typical pair measured with
    every CPU busy) a figure is mostly its share of the CPU: it is slow only under
    judging.SATURATED_FLOOR of its peers' reference, else ``contended`` with that said.
    """
    out: dict[tuple[str, str], dict[str, Any]] = {}
    by_name = {culprits.pair_name(p): p for p in pairs}
    typical: float | None = None
    for found in culprits.outliers(pairs, pattern, declared):
        if found["code"] not in SLOW_CODES:
            continue
        reference = found["detail"].get("reference_gbps")
        for name in found["pairs"]:
            p = by_name.get(name)
            if p is None or p["status"] != "ok" or key(p["a"], p["b"]) in out:
                continue
            bw = p.get("busbw_gbps")
            figure = f"busbw {bw:.3g} GB/s" if bw is not None else "busbw unknown"
            mark = {
                "status": "degraded",
                "reason": "below_peers",
                "hint": f"{figure}, slow next to its peers in this sweep: {found['text']}",
                "peers": {"code": found["code"], "subject": found["subject"], "reference_gbps": reference},
            }
            typical = judging.typical_load(pairs) if typical is None else typical
            far = (
                isinstance(bw, (int, float))
                and isinstance(reference, (int, float))
                and bw < judging.SATURATED_FLOOR * reference
            )
            if judging.saturated(judging.pair_score(p), typical) and not far:
                mark["status"] = "contended"
                mark["hint"] = (
                    f"{figure}, below its peers in this sweep ({found['text']}), not below "
                    f"{judging.SATURATED_FLOOR:.0%} of them; {judging.saturated_words(typical)}: contended, not acted on"
                )
            out[key(p["a"], p["b"])] = mark
    return out


def suspects(pairs: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """Pairs the pass looks at again: failed, timed out or slow. An offline agent is known from its heartbeats."""
    return [p for p in pairs if p["status"] in ("degraded", "failed", "timeout")]


def plan(nodes: list[str], pairs: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """The probes of the pass, most telling first: each suspect pair again, then each side with a healthy partner.

    Bounded: a node takes part in at most PER_NODE of them (the caller keeps the first
    MAX_ROUNDS rounds of their schedule). Nothing when every pair is ok.
    """
    bad = suspects(pairs)
    if not bad:
        return []
    healthy = [n for n in nodes if n not in _troubled(pairs)]
    load: dict[str, int] = defaultdict(int)
    out: list[tuple[str, str]] = []
    seen: set[tuple[str, str]] = set()

    def add(a: str, b: str, cap: int = PER_NODE) -> bool:
        if key(a, b) in seen or load[a] >= cap or load[b] >= cap:
            return False
        seen.add(key(a, b))
        load[a] += 1
        load[b] += 1
        out.append((a, b))
        return True

    for p in bad:
        add(p["a"], p["b"], PER_NODE - PARTNERS)  # a slot left for each side's healthy partner
    partnered: dict[str, int] = defaultdict(int)
    for p in bad:
        for side in (p["a"], p["b"]):
            for h in sorted(healthy, key=lambda n: load[n]):
                if partnered[side] >= PARTNERS:
                    break
                if h != side and add(side, h):
                    partnered[side] += 1
    return out


def _troubled(pairs: list[dict[str, Any]]) -> set[str]:
    """Nodes not healthy in this sweep: in a pair that did not pass, unless the other side is in more of them,
    and every node whose agent a pair's hint says went silent (however few of its pairs it missed).

    A slow or dead node's peers each have one bad pair, with it: they are healthy partners for
    everyone else (and for the node itself), while both sides of a lone bad link are suspect.
    """
    bad = [p for p in pairs if p["status"] not in ("ok", "skipped")]
    gone = {n for p in bad for n in fleet.gone_in_hint(p.get("hint"))}
    count: dict[str, int] = defaultdict(int)
    for p in bad:
        count[p["a"]] += 1
        count[p["b"]] += 1
    out = set()
    for p in bad:
        for side, other in ((p["a"], p["b"]), (p["b"], p["a"])):
            if count[other] <= count[side]:
                out.add(side)
    return out | gone


def _bw(p: Mapping[str, Any] | None) -> str:
    bw = (p or {}).get("busbw_gbps")
    return f"{bw:.3g} GB/s" if bw is not None else "no busbw"


def _what(p: Mapping[str, Any]) -> str:
    """How a probe went, in a few words: "slow (0.18 GB/s)", "timeout at connect (connect_timeout)", "normal (..)"."""
    if p["status"] in BAD:
        where = f" at {p['stage']}" if p.get("stage") else ""
        why = f" ({p['reason']})" if p.get("reason") else ""
        return f"{p['status']}{where}{why}"
    if p["status"] == "degraded":
        return f"slow ({_bw(p)})"
    return f"normal ({_bw(p)})"


def bad_again(first: Mapping[str, Any], second: Mapping[str, Any]) -> bool:
    """Whether a second probe shows the same trouble as the first (a failure, or a slow link slow again)."""
    if second["status"] in BAD:
        return True
    if first["status"] in BAD:
        return False  # it worked this time, whatever its speed
    if second["status"] == "degraded":
        return True
    reference = ((first.get("evidence") or {}).get("peers") or {}).get("reference_gbps")
    bw = second.get("busbw_gbps")
    return bool(reference and bw is not None and bw < SLOW_AGAIN_RATIO * reference)


def judge(
    pairs: list[dict[str, Any]], again: list[dict[str, Any]]
) -> tuple[dict[tuple[str, str], dict[str, Any]], list[dict[str, Any]]]:
    """What the second pass changed: new fields of the suspect pairs, and a finding for each.

    ``pairs``: the planned rounds' pairs (after peer_marks); ``again``: the pass's probes.
    A suspect probed again and bad again is confirmed (its status stays); fine again, it
    is ``transient``. One not probed again (its nodes were at their PER_NODE bound) is
    confirmed when a side failed with its healthy partner too, else it stays as it was.
    """
    bad = suspects(pairs)
    if not bad:
        return {}, []
    suspect_keys = {key(p["a"], p["b"]): p for p in bad}
    typical = judging.typical_load(pairs)
    redone = {key(r["a"], r["b"]): r for r in again if key(r["a"], r["b"]) in suspect_keys}
    with_partner: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in again:
        if key(r["a"], r["b"]) not in suspect_keys:
            with_partner[r["a"]].append(r)
            with_partner[r["b"]].append(r)
    updates: dict[tuple[str, str], dict[str, Any]] = {}
    told: list[dict[str, Any]] = []
    for k, p in suspect_keys.items():
        second = redone.get(k)
        sides = []
        side_bad = []
        for side in (p["a"], p["b"]):
            for r in with_partner.get(side, []):
                other = r["b"] if r["a"] == side else r["a"]
                if other in fleet.gone_in_hint(r.get("hint")):
                    continue  # the partner's agent went silent: that says nothing about this side
                worse = bad_again(p, r)
                sides.append({"node": side, "partner": other, "status": r["status"], "busbw_gbps": r.get("busbw_gbps")})
                if worse:
                    side_bad.append(side)
        # Far below what it is compared with, only other traffic explains a figure; busy cores do not.
        cpu = not judging.far_below(p)
        load = busy(p, typical, cpu) if p["status"] not in BAD else None
        if second is not None:
            confirmed = bad_again(p, second)
            if confirmed and p.get("reason") in SLOW_REASONS and second["status"] not in BAD:
                confirmed = not judging.as_fast_as_partners(
                    p, second, with_partner.get(p["a"], []), with_partner.get(p["b"], [])
                )
        elif side_bad or load:
            confirmed = True
        else:
            continue  # not looked at again: it stays as it was
        heavier = None
        if confirmed and second is not None and p.get("reason") in SLOW_REASONS and second["status"] not in BAD:
            heavier = judging.heavier_again(p, second)
        if confirmed and load and (second is None or busy(second, typical, cpu)):
            outcome = "contended"  # slow each time it was measured, and each time beside other work
        elif heavier:
            outcome, load = "contended", heavier  # slow again, but only under heavier load than the first look
        else:
            outcome = "confirmed" if confirmed else "transient"
        record = {
            "outcome": outcome,
            "first": {
                "round": p.get("round"),
                "status": p["status"],
                "reason": p.get("reason"),
                "busbw_gbps": p.get("busbw_gbps"),
            },
            "again": second
            and {
                "round": second.get("round"),
                "status": second["status"],
                "reason": second.get("reason"),
                "busbw_gbps": second.get("busbw_gbps"),
            },
            "partners": sides,
            "culprit": _culprit(p, side_bad, sides),
        }
        if outcome == "contended":
            record["load"] = load
            text = f"{_text(p, second, sides, side_bad, True).rsplit(': ', 1)[0]}; {load}: contended, not acted on"
        else:
            text = _text(p, second, sides, side_bad, confirmed)
        fields: dict[str, Any] = {"confirmation": record}
        if outcome != "confirmed":
            fields.update(status=outcome, hint=text)
        updates[k] = fields
        if len(told) < MAX_TOLD:
            told.append(
                {
                    "severity": "info",
                    "code": outcome,
                    "subject": link(p["a"], p["b"]),
                    "text": text,
                    "pairs": [link(p["a"], p["b"])],
                    "detail": {
                        "evidence": [record],
                        "next_step": "" if outcome == "confirmed" else "nothing: not acted on",
                    },
                }
            )
    return updates, told


def busy(p: Mapping[str, Any], typical: float | None = None, cpu: bool = True) -> str | None:
    """What else kept a side of the pair busy while it measured, in words with the figures; None when neither was.

    Busy: the side's interface carried other bytes at CONTENDED_NIC_SHARE of the probe's own or
    more (not on loopback, where both ranks' bytes cross one interface twice), or CONTENDED_STEAL
    of its CPU time was stolen (agents/evidence.py, ``load_delta``, around the bandwidth stage).
    Given the sweep's ``typical`` load (core/judging.py), also CPU pressure or the probe's own wait
    for a CPU, where that side's figure is busy and heavier than the typical one.
    Other work on the CPUs counted as busy cores decides nothing: where hosts share a machine's
    cores (a namespace bed, containers), the peer rank itself counts as other work, and load that
    every node carries explains no one pair. With ``cpu`` false (a figure far below what it is compared
    with: judging.far_below) only other traffic on an interface counts.
    """
    ev = p.get("evidence") or {}
    said = []
    for role in ("a", "b"):
        side = ev.get(role) or {}
        load = side.get("load") or {}
        why = []
        own, total = load.get("own_bytes"), load.get("nic_bytes")
        if own and total is not None and side.get("interface") != "lo" and total - own >= CONTENDED_NIC_SHARE * own:
            why.append(f"other traffic {load.get('other_gbps', 0):.3g} GB/s on its interface beside the probe's own")
        if cpu and (load.get("cpu_steal") or 0) >= CONTENDED_STEAL:
            why.append(f"{load['cpu_steal']:.0%} of its CPU stolen")
        if cpu and typical is not None:
            parts = judging.side_parts(load, side.get("interface"))
            for name in ("cpu_pressure", "sched_wait"):  # a cold start alone is not contention: its figure judges
                if parts.get(name, 0.0) >= judging.BUSY and parts[name] >= typical + judging.HEAVIER:
                    why.append(judging.WORDS[name].format(parts[name]))
        if why:
            said.append(f"{p[role]} was busy ({', '.join(why)})")
    return "; ".join(said) or None


def _culprit(p: Mapping[str, Any], side_bad: list[str], sides: list[dict[str, Any]]) -> str | None:
    """The node the partners point at, or the link, when both sides were probed with healthy partners.

    One side bad with its partner and the other fine with its own is that side; both fine is the link.
    A side that could not be probed again (its node at its PER_NODE bound) leaves the blame open: the one
    side seen bad may only have shared the machine with the pass's other probes.
    """
    if {s["node"] for s in sides} != {p["a"], p["b"]}:
        return None
    blamed = sorted(set(side_bad))
    if len(blamed) == 1:
        return blamed[0]
    if not blamed:
        return link(p["a"], p["b"])
    return None


def _text(
    p: Mapping[str, Any],
    second: Mapping[str, Any] | None,
    sides: list[dict[str, Any]],
    side_bad: list[str],
    confirmed: bool,
) -> str:
    """The issue's sentence: "n4<->n8 slow in round 3 (0.18 GB/s), normal when probed again (0.41 GB/s) and
    with n2 and n6: transient, not acted on"."""
    name = link(p["a"], p["b"])
    first = _what(p).replace(" (", f" in round {p.get('round')} (", 1) if p.get("round") else _what(p)
    parts = [f"{name} {first}"]
    if second is not None:
        if not bad_again(p, second):
            again = f"normal ({_bw(second)})"
        else:  # a re-probe is judged against the first look's peers: "ok" on its own, slow next to them
            again = _what(second) if second["status"] in BAD else f"slow ({_bw(second)})"
        parts.append(f"{again} when probed again")
    fine = sorted({s["partner"] for s in sides if s["node"] not in side_bad})
    worse = [f"{s['node']} with {s['partner']}" for s in sides if s["node"] in side_bad]
    tail = ""
    if fine:
        tail += f" and with {' and '.join(fine)}" if second is not None else f"; fine with {' and '.join(fine)}"
    if worse:
        tail += f"; bad again: {', '.join(worse)}"
    if confirmed:
        culprit = _culprit(p, side_bad, sides)
        verdict = f"confirmed{f', {culprit}' if culprit else ''}"
    else:
        verdict = "transient, not acted on"
    return ", ".join(parts) + tail + f": {verdict}"


ACTED_SLOW = ("slow_node", "slow_link")  # slow findings that a confirmed second look makes a fail (drained)
# ... when the second look was as slow as the first: at most this many times its busbw. A link that came
# back several times faster (a shaper lifted, a burst over) but still under half its peers is "slow again"
# for the pair's outcome, and not enough to take a node out of service.
SAME_SLOW_FACTOR = 2.0
MAX_AGAIN_LISTED = 3  # second-look figures quoted in a confirmed slow finding's text


def outcome(p: Mapping[str, Any]) -> str | None:
    """What the confirmation pass decided about a pair (confirmed, transient, contended), None if it did not look."""
    return (((p.get("evidence") or {}).get("confirmation")) or {}).get("outcome")


def confirmed_slow(found: list[dict[str, Any]], pairs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The findings, with each slow node or slow link the pass confirmed raised to a fail (acted on),
    and each slow finding whose pairs all came out ``contended`` or ``transient`` lowered to info.

    Confirmed: at least one of the finding's pairs was probed again and every one the pass
    looked at came out ``confirmed`` (slow again, and not beside other traffic: a ``contended``
    or ``transient`` outcome keeps the finding a warning), each probed again at most
    SAME_SLOW_FACTOR times its first busbw (as slow as the first time, not recovering), and
    the partner probes agree (``_partners_agree``). Its text adds the second look's figures.
    A slow segment stays a warning: it names a switch path, not nodes to take out of service.
    """
    by_name = {culprits.pair_name(p): p for p in pairs}
    out = []
    for f in found:
        listed = [by_name[n] for n in f.get("pairs") or () if n in by_name]
        if f["code"] in SLOW_CODES and listed and all(p["status"] in EXPLAINED for p in listed):
            # Every pair behind it was slow only beside other work, or fine when probed again: never an alarm.
            out.append({**f, "severity": "info", "text": f"{f['text']}; each of its pairs {_explained(listed)}"})
            continue
        looked = [p for p in listed if outcome(p)]
        if f["code"] not in ACTED_SLOW or not looked or any(outcome(p) != "confirmed" for p in looked):
            out.append(f)
            continue
        if not all(_partners_agree(f, p["evidence"]["confirmation"]) for p in looked):
            out.append(f)
            continue
        probed = [p["evidence"]["confirmation"] for p in looked if p["evidence"]["confirmation"].get("again")]
        if not probed or not all(_as_slow(c["first"], c["again"]) for c in probed):
            out.append(f)
            continue
        again = []
        for p in looked[:MAX_AGAIN_LISTED]:
            second = p["evidence"]["confirmation"].get("again") or {}
            again.append(f"{culprits.pair_name(p)} {_bw(second) if second else 'slow with a healthy partner too'}")
        more = f" and {len(looked) - MAX_AGAIN_LISTED} more" if len(looked) > MAX_AGAIN_LISTED else ""
        text = f"{f['text']}; confirmed, slow again when probed again ({', '.join(again)}{more})"
        out.append({**f, "severity": "fail", "text": text})
    return out


EXPLAINED = ("contended", "transient")  # pair statuses that explain a slow finding away


def _explained(listed: list[dict[str, Any]]) -> str:
    said = sorted({p["status"] for p in listed})
    return f"{' or '.join(said)}: not acted on"


def _partners_agree(found: Mapping[str, Any], record: Mapping[str, Any]) -> bool:
    """Whether the partner probes point where the slow finding does.

    A side "as slow" as the pair: failed with its healthy partner, or ran there at no more than
    SAME_SLOW_FACTOR times the pair's own busbw. A slow link: both its sides were probed with
    partners and neither was as slow there. A slow node: no other node of its pairs was as slow
    with its own partner. Sides as slow with everyone they met say the machine or fabric was slow
    at that moment, not this link or this node: reported, never acted on.
    """
    pair_bw = (record.get("again") or {}).get("busbw_gbps") or (record.get("first") or {}).get("busbw_gbps")

    def as_slow(side: Mapping[str, Any]) -> bool:
        bw = side.get("busbw_gbps")
        return side.get("status") in BAD or bw is None or pair_bw is None or bw <= SAME_SLOW_FACTOR * pair_bw

    sides = record.get("partners") or []
    slow_sides = {s["node"] for s in sides if as_slow(s)}
    if found["code"] == "slow_link":
        ends = set(found["subject"].split("<->"))
        return {s["node"] for s in sides} >= ends and not slow_sides & ends
    return not slow_sides - {found["subject"]}


def _as_slow(first: Mapping[str, Any] | None, again: Mapping[str, Any]) -> bool:
    """Whether a second look measured the pair as slow as the first (within SAME_SLOW_FACTOR)."""
    before, after = (first or {}).get("busbw_gbps"), again.get("busbw_gbps")
    return before is not None and after is not None and after <= SAME_SLOW_FACTOR * before
