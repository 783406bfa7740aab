"""Judging a figure with the conditions it was measured under: like with like. Pure: no Django.

Each half of a probe records the load it measured under (agents/evidence.py, ``load``):
CPU pressure (PSI), the probe's own scheduling delay, stolen CPU time, other bytes on its
interface, and whether it started cold. A link's busbw then means something only next to
figures taken under comparable load:

- **against its peers first**: the other links of the same sweep were measured at the same
  moment, under the same load. A pair below its own history (its band, core/expected_busbw.py)
  is slow only when it is also below its peers by a margin that grows with the link's own
  spread. Below its history but not its peers, the whole sweep ran slow: the pair is ``ok``,
  or ``contended`` where a side was busy (reported with the figure, never an alarm);
- **a pair far below its peers under the same load is slow whatever the load**: load that
  every node carries (a busy bed) explains nothing; only a side heavier than the sweep's
  typical load does (``explains``);
- **a second look under heavier load confirms nothing by itself** (``heavier_again``).

A hostile or broken agent's load figures are read as numbers in range or not at all.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from statistics import median
from typing import Any

from cluster_health.core import culprits, expected_busbw

# A side whose load score (0 to 1) reaches this was busy while it measured.
BUSY = 0.3
# A load this much above another's is heavier: the two figures were not taken under comparable load.
HEAVIER = 0.2
# What maps onto BUSY for the figures that are not already a share of the time: this share of CPU
# time stolen by the hypervisor, other bytes on the interface at this share of the probe's own.
BUSY_STEAL = 0.1
BUSY_NIC_SHARE = 0.5
MIN_PEERS = 2  # peer links needed before a pair is compared with its peers at all
# The margin below its peers grows with how much they scatter at that moment: this many robust standard
# deviations of their ratios (a heavily and unevenly loaded moment scatters every link), at most MAX_MARGIN.
NOW_K = 3.0
MAX_MARGIN = 0.7
# Load explains a slow figure only down to this share of what it is compared with: busy cores and a
# cold start slow a probe, they do not cut it to a fraction (a shaped or broken link does).
FAR_BELOW = 1 - MAX_MARGIN
# A saturated moment: the pair's busier side and the sweep's typical pair both at this load score (every
# CPU the probes share busy nearly all the time). A TCP probe's figure is then mostly its share of the
# CPU: on a 2-core bed under busy loops healthy links scatter 4x within one sweep (0.2 to 0.8 GB/s). Such a
# figure is slow only below SATURATED_FLOOR of its reference; a link shaped to a tenth still is.
SATURATED = 0.9
SATURATED_FLOOR = 0.2
MEASURED = ("ok", "degraded", "contended")  # pairs whose busbw is a figure of their link


def _share(value: Any) -> float | None:
    """A finite number in [0, 1] (a share of the time), else None: an agent's figure is not trusted blindly."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return min(1.0, max(0.0, float(value)))


def side_parts(load: Any, interface: Any = None) -> dict[str, float]:
    """One side's load, each figure as a score where BUSY means busy, keyed by what it measures."""
    if not isinstance(load, Mapping):
        return {}
    out: dict[str, float] = {}
    for name in ("cpu_pressure", "sched_wait"):
        v = _share(load.get(name))
        if v is not None:
            out[name] = v
    steal = _share(load.get("cpu_steal"))
    if steal is not None:
        out["cpu_steal"] = min(1.0, steal / BUSY_STEAL * BUSY)
    own, total = load.get("own_bytes"), load.get("nic_bytes")
    # Not on loopback, where both ranks' bytes cross one interface twice.
    if interface != "lo" and isinstance(own, int) and isinstance(total, int) and own > 0 and total >= own:
        out["nic"] = min(1.0, (total - own) / own / BUSY_NIC_SHARE * BUSY)
    if load.get("cold") is True:
        out["cold"] = 1.0
    return out


def side_score(load: Any, interface: Any = None) -> float | None:
    parts = side_parts(load, interface)
    return max(parts.values()) if parts else None


def _sides(p: Mapping[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    ev = p.get("evidence") or {}
    out = []
    for role in ("a", "b"):
        side = ev.get(role) if isinstance(ev, Mapping) else None
        if isinstance(side, Mapping):
            out.append((str(p.get(role) or side.get("node") or role), dict(side)))
    return out


def pair_score(p: Mapping[str, Any]) -> float | None:
    """The heavier side's load score of a pair (from its evidence), None where neither side measured one."""
    scores = [s for _, side in _sides(p) if (s := side_score(side.get("load"), side.get("interface"))) is not None]
    return max(scores) if scores else None


def evidence_score(ev: Any) -> float | None:
    """``pair_score`` from a pair's evidence alone (the ``load`` column written when a pair closes)."""
    return pair_score({"evidence": ev}) if isinstance(ev, Mapping) else None


def typical_load(pairs: Iterable[Mapping[str, Any]]) -> float:
    """The load most of a sweep's pairs were measured under: the median of their scores (0 without any)."""
    scores = [s for p in pairs if p.get("status") in MEASURED and (s := pair_score(p)) is not None]
    return median(scores) if scores else 0.0


def explains(score: float | None, typical: float) -> bool:
    """Whether a load explains a slow figure: busy, and heavier than the sweep's typical load."""
    return score is not None and score >= BUSY and score >= typical + HEAVIER


def saturated(score: float | None, typical: float) -> bool:
    """Whether a pair was measured at a saturated moment: its busier side and the sweep's typical pair alike."""
    return score is not None and score >= SATURATED and typical >= SATURATED


def saturated_figure(score: float | None) -> bool:
    """Whether one figure was measured with a side's CPU saturated: it enters no trend (core/history.py)."""
    return score is not None and score >= SATURATED


def saturated_words(typical: float) -> str:
    return f"every node's CPU was saturated while the sweep measured (typical load {typical:.0%})"


WORDS = {
    "cpu_pressure": "CPU pressure {:.0%} during the probe",
    "sched_wait": "its probe waited {:.0%} of the time for a CPU",
    "cpu_steal": "{:.0%} of its CPU stolen",
    "nic": "other traffic on its interface at {:.1f}x the probe's own",
    "cold": "the probe started cold (torch imported while the agent's warm probe process started)",
}


def load_words(p: Mapping[str, Any], typical: float = 0.0) -> str | None:
    """The busy sides of a pair in words with their figures ("host3: CPU pressure 71 % during the probe")."""
    said = []
    for node, side in _sides(p):
        load = side.get("load") or {}
        parts = side_parts(load, side.get("interface"))
        busy = [name for name, v in parts.items() if v >= BUSY and v >= typical + HEAVIER]
        if not busy:
            continue
        figures = []
        for name in busy:
            if name == "cpu_steal":
                figures.append(WORDS[name].format(_share(load.get("cpu_steal")) or 0))
            elif name == "nic":
                figures.append(WORDS[name].format((load["nic_bytes"] - load["own_bytes"]) / load["own_bytes"]))
            elif name == "cold":
                figures.append(WORDS[name])
            else:
                figures.append(WORDS[name].format(parts[name]))
        said.append(f"{node}: {', '.join(figures)}")
    return "; ".join(said) or None


def expected_of(p: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The baseline a pair was judged against when it closed (``evidence.expected``), if it had one."""
    ex = (p.get("evidence") or {}).get("expected")
    if isinstance(ex, Mapping) and isinstance(ex.get("busbw_gbps"), (int, float)) and ex["busbw_gbps"] > 0:
        return ex
    return None


def ratio(p: Mapping[str, Any]) -> float | None:
    """A measured pair's busbw as a share of its own baseline."""
    ex, bw = expected_of(p), p.get("busbw_gbps")
    if ex is None or p.get("status") not in MEASURED or not isinstance(bw, (int, float)):
        return None
    return float(bw) / float(ex["busbw_gbps"])


class PeerReference:
    """What each pair's peers reached as a share of their own baselines, at the same moment.

    For a pair, the most demanding of two medians: the links without side ``a``, the links without
    side ``b``. A slow node then cannot pull its own pairs' reference down (its pairs are in neither
    median of its partner's side), and a sweep slow everywhere compares slow with slow. Sorted once
    (culprits.Reference), each node's median without its own links found by counting, and kept: a
    sweep of 1,024 nodes has 523,776 links, and every pair of a slow night may ask.
    """

    def __init__(self, measured: list[tuple[str, str, float]]):
        self.everyone = culprits.Reference(r for _, _, r in measured)
        self.mine: dict[str, list[float]] = defaultdict(list)
        for a, b, r in measured:
            self.mine[a].append(r)
            self.mine[b].append(r)
        self.without: dict[str, float | None] = {}

    def _without(self, node: str) -> float | None:
        if node not in self.without:
            own = self.mine.get(node, [])
            left = self.everyone.without(own)
            self.without[node] = left.median if left.count >= MIN_PEERS else None
        return self.without[node]

    def of(self, p: Mapping[str, Any]) -> float | None:
        refs = [r for side in (p["a"], p["b"]) if (r := self._without(side)) is not None]
        return max(refs) if refs else None


def margin(expected: Mapping[str, Any], degraded_ratio: float, scatter_now: float = 0.0) -> float:
    """How far below its peers (as a share) a link must fall to be slow: more for a link that scatters more,
    and more at a moment when its peers scatter more (``scatter_now``: their robust spread, as a share).

    At most MAX_MARGIN: a link at a fifth of its peers is slow however noisy the moment.
    """
    mad, samples = expected.get("mad_gbps"), expected.get("samples") or 1
    now = NOW_K * scatter_now
    if not isinstance(mad, (int, float)):
        return min(MAX_MARGIN, max(expected_busbw.MIN_DROP, 1 - degraded_ratio, now))
    spread = expected_busbw.NOISE_K * expected_busbw.MAD_TO_SIGMA * mad / expected["busbw_gbps"]
    own = spread if samples >= expected_busbw.MIN_HISTORY else 0.0
    return min(MAX_MARGIN, max(expected_busbw.MIN_DROP, own, now))


def scatter(ratios: list[float]) -> float:
    """The robust spread of a sweep's ratios as a share of their median (0 with fewer than MIN_PEERS + 1)."""
    if len(ratios) <= MIN_PEERS:
        return 0.0
    mid = median(ratios)
    if mid <= 0:
        return 0.0
    return expected_busbw.MAD_TO_SIGMA * median(abs(r - mid) for r in ratios) / mid


def against_peers(pairs: list[dict[str, Any]], degraded_ratio: float) -> dict[tuple[str, str], dict[str, Any]]:
    """Each pair below its own history, judged again next to its peers and its load: its new fields.

    A ``below_baseline`` pair stays ``degraded`` when it is also below its peers by ``margin``
    and its load does not explain it; becomes ``contended`` when a busy side explains it (heavier
    than the sweep's typical load, or the whole sweep ran slow while it was busy); else ``ok``.
    A pair with fewer than MIN_PEERS peer links measured keeps its history's judgement.
    """
    below = [p for p in pairs if (p["status"], p.get("reason")) == ("degraded", "below_baseline")]
    if not below:
        return {}  # the common case: nothing to judge again, and no reference to build
    measured = [(p["a"], p["b"], r) for p in pairs if (r := ratio(p)) is not None]
    peers = PeerReference(measured)
    typical = typical_load(pairs)
    scatter_now = scatter([r for _, _, r in measured])
    updates: dict[tuple[str, str], dict[str, Any]] = {}
    for p in below:
        r, ex = ratio(p), expected_of(p)
        if r is None or ex is None:
            continue
        ref = peers.of(p)
        score = pair_score(p)
        words = load_words(p, typical)
        if ref is None:  # no peers measured at the same moment: its history alone decides, at comparable load
            base = _share(ex.get("load"))
            if (
                base is not None and r >= FAR_BELOW and explains(score, base)
            ):  # no load known of its history: nothing to compare
                updates[_key(p)] = {
                    "judged": {"ratio": round(r, 3), "load": score, "baseline_load": base},
                    "status": "contended",
                    "hint": f"{p.get('hint') or ''}; measured under heavier load than its history "
                    f"({words or load_words(p, base)}): contended, not acted on",
                }
            continue
        need = ref * (1 - margin(ex, degraded_ratio, scatter_now))
        record = {"ratio": round(r, 3), "peers_ratio": round(ref, 3), "slow_below": round(need, 3)}
        record["peers_scatter"] = round(scatter_now, 3)
        if score is not None:
            record.update(load=round(score, 3), typical_load=round(typical, 3))
        key = _key(p)
        told = f"{r:.0%} of its usual {ex['busbw_gbps']:.3g} GB/s; its peers in this sweep at {ref:.0%} of theirs"
        at_saturation = saturated(score, typical)
        if at_saturation:
            record["slow_below"] = round(min(need, SATURATED_FLOOR * ref), 3)
            slow = r < SATURATED_FLOOR * ref and r < need
        else:
            slow = r < need and (not explains(score, typical) or r < FAR_BELOW * ref)
        if slow:
            updates[key] = {"judged": record, "hint": f"{p.get('hint') or ''}; {told}: slow next to its peers too"}
        elif r < need or (score is not None and score >= BUSY):
            why = words or load_words(p, 0.0) or "a side was busy"
            alike = "far below its peers, and only it was busy" if r < need else "its peers slowed alike"
            if at_saturation and r < need:
                alike, why = f"below its peers, but not below {SATURATED_FLOOR:.0%} of them", saturated_words(typical)
            updates[key] = {
                "judged": record,
                "status": "contended",
                "hint": f"busbw {p['busbw_gbps']:.3g} GB/s, {told} ({alike}); {why}: contended, not acted on",
            }
        else:
            updates[key] = {
                "judged": record,
                "status": "ok",
                "reason": None,
                "hint": None,
            }
    return updates


def _key(p: Mapping[str, Any]) -> tuple[str, str]:
    return (p["a"], p["b"]) if p["a"] <= p["b"] else (p["b"], p["a"])


def sweep_slow(pairs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One info finding when most of a sweep's links ran a fifth or more below their own history at once.

    Never an alarm: each pair was judged next to its peers, and a slowdown every link shares
    names no node or link. It tells the operator what the cells alone do not.
    """
    measured = [r for p in pairs if (r := ratio(p)) is not None]
    if len(measured) < MIN_PEERS or median(measured) >= 1 - expected_busbw.MIN_DROP:
        return []
    mid, typical = median(measured), typical_load(pairs)
    cause = (
        f"while the nodes were busy (typical load {typical:.0%})"
        if typical >= BUSY
        else "with no load on the nodes to explain it: a fabric-wide slowdown, or a change since the baseline"
    )
    return [
        {
            "severity": "info",
            "code": "sweep_slow",
            "subject": "fleet",
            "text": f"the sweep's links ran at {mid:.0%} of their own history (median of {len(measured)} links) {cause}",
            "pairs": [],
            "detail": {"median_ratio": round(mid, 3), "links": len(measured), "typical_load": round(typical, 3)},
        }
    ]


def as_fast_as_partners(
    first: Mapping[str, Any],
    second: Mapping[str, Any],
    partners_a: Sequence[Mapping[str, Any]],
    partners_b: Sequence[Mapping[str, Any]],
) -> bool:
    """Whether a slow pair's second look kept up with its sides' partner probes of the same moment.

    Each side's partner probes ran in the same pass, under the same load: the faster of them, as
    a share of its own baseline, is what the moment allowed. A second look within the link's
    margin of it is not slow again, whatever its history says (a busy night slows the pass as
    much as the first look). Needs both sides probed with a partner, and baselines to compare by.
    """
    mine, ex = ratio(second), expected_of(first) or expected_of(second)
    if mine is None or ex is None:
        return False
    sides = [[r for q in probes if (r := ratio(q)) is not None] for probes in (partners_a, partners_b)]
    if not all(sides):
        return False
    judged = (first.get("evidence") or {}).get("judged") or {}
    scatter_now = _share(judged.get("peers_scatter")) or 0.0
    reference = max(max(s) for s in sides)
    return mine >= reference * (1 - margin(ex, 1 - expected_busbw.MIN_DROP, scatter_now))


def far_below(first: Mapping[str, Any]) -> bool:
    """Whether a slow pair's first look was under FAR_BELOW of what it is compared with (its history, else
    its peers' reference): busy cores slow a probe, they do not cut it to a fraction; only other traffic can."""
    first_ratio = ratio(first)
    reference = ((first.get("evidence") or {}).get("peers") or {}).get("reference_gbps")
    if first_ratio is None and isinstance(reference, (int, float)) and reference > 0:
        bw = first.get("busbw_gbps")
        first_ratio = bw / reference if isinstance(bw, (int, float)) else None
    return first_ratio is not None and first_ratio < FAR_BELOW


def heavier_again(first: Mapping[str, Any], second: Mapping[str, Any]) -> str | None:
    """Why a second look that was slow again confirms nothing: it measured under heavier load than the first.

    Not for a pair whose first look was already far below what it is compared with (under
    1 - MAX_MARGIN of its history, or of its peers' reference): busy cores slow a probe, they do
    not cut it to a fraction, and a shaped or broken link must not hide behind a busier second look.
    """
    if far_below(first):
        return None
    before, after = pair_score(first), pair_score(second)
    if after is None or after < BUSY or after < (before or 0.0) + HEAVIER:
        return None
    words = load_words(second, before or 0.0) or f"load {after:.0%}"
    return f"probed again under heavier load than the first time ({words}; first {before or 0:.0%})"
