"""Baselines: the busbw a pair is expected to reach, from one sweep or the rolling median of recent clean sweeps.

The rolling median takes every clean sweep that measured the pairs the same way (the same
backend and message sizes), whatever started it: a hand-run sweep or a new deployment's
first sweeps teach it as the nightly ones do. Only ``ok`` probes count: a ``transient``,
``contended`` or ``degraded`` one is not what the link usually does, and a sweep that failed
is left out whole (after a fault, a link is judged against its history from before it). Each
pair keeps its spread and the median load its figures were measured under
(core/judging.py), so a figure is compared with history taken under comparable load. A
sweep named as the baseline gives each pair it measured, a ``transient`` one at its second
look's busbw.
"""

from __future__ import annotations

from statistics import median

from cluster_health.core.expected_busbw import median_and_mad
from cluster_health.models import Baseline, BaselinePair, PairProbe, Sweep, pair_key
from cluster_health.shapes import matrices

# Clean sweeps the rolling median is taken over: enough that a link met by most of them reaches
# expected_busbw.MIN_HISTORY figures, and its spread means something.
ROLLING_BASELINE_SWEEPS = 6
CANDIDATE_SWEEPS = 50  # recent sweeps looked through for comparable ones
# The scheduled kinds that measure every pair they run (a nightly sampled or topology sweep
# meets only some pairs: each pair's median is taken over the nights that met it).
ROLLING_KINDS = ("full", "pairs", "sampled", "topology")
INSERT_BATCH = 5000  # baseline rows per INSERT
READ_CHUNK = 10000  # pair rows read per round trip


def baseline_from_sweep(sweep: Sweep, name: str | None = None) -> Baseline:
    base = Baseline.objects.create(
        name=name or f"sweep {sweep.pk}", source="sweep", from_sweep=sweep, sweeps_used=[sweep.pk]
    )
    rows = PairProbe.objects.filter(sweep=sweep, status__in=("ok", "degraded"), busbw_gbps__isnull=False).exclude(
        evidence__has_key="uplink"  # a share of an uplink measured at once with others (closing.uplink_share)
    )
    measured, loads = {}, {}
    for a, b, bw, load in rows.values_list("node_a__name", "node_b__name", "busbw_gbps", "load"):
        measured[pair_key(a, b)], loads[pair_key(a, b)] = bw, load
    # A transient pair (bad once, normal when the confirmation pass probed it again): its second look.
    again = PairProbe.objects.filter(sweep=sweep, status="transient")
    for a, b, ev in again.values_list("node_a__name", "node_b__name", "evidence"):
        bw = (((ev or {}).get("confirmation") or {}).get("again") or {}).get("busbw_gbps")
        if bw:
            measured[pair_key(a, b)] = bw
    if sweep.collapsed_ok:  # its passing pairs' rows are gone; the stored matrix has their busbw
        for p in matrices.collapsed_pairs(sweep):
            if p["busbw_gbps"] is not None:
                measured[pair_key(p["a"], p["b"])] = p["busbw_gbps"]
    BaselinePair.objects.bulk_create(
        [
            BaselinePair(baseline=base, node_a=k[0], node_b=k[1], busbw_gbps=bw, load=loads.get(k))
            for k, bw in measured.items()
        ],
        batch_size=INSERT_BATCH,
    )
    return base


def rolling_baseline(
    last: int = ROLLING_BASELINE_SWEEPS, backend: str | None = None, sizes: list | None = None
) -> Baseline | None:
    """Median busbw per pair over the last clean comparable sweeps, with its spread (MAD); None if there is none yet.

    Comparable: the same backend (when given) and the same message sizes (None: the defaults).
    """
    candidates = Sweep.objects.filter(kind__in=ROLLING_KINDS, status="finished", verdict__in=("pass", "warn"))
    if backend:
        candidates = candidates.filter(backend=backend)
    good = [
        pk
        for pk, params in candidates.order_by("-finished").values_list("pk", "params")[:CANDIDATE_SWEEPS]
        if (params or {}).get("sizes") == sizes
    ][:last]
    if not good:
        return None
    samples: dict[tuple[str, str], list[float]] = {}
    loads: dict[tuple[str, str], list[float]] = {}
    rows = (
        PairProbe.objects.filter(sweep_id__in=good, status="ok", busbw_gbps__isnull=False)
        .exclude(evidence__has_key="uplink")  # a share of an uplink, not the link's figure (closing.uplink_share)
        .values_list("node_a__name", "node_b__name", "busbw_gbps", "load")
    )
    for a, b, bw, load in rows.iterator(chunk_size=READ_CHUNK):
        k = pair_key(a, b)
        samples.setdefault(k, []).append(bw)
        if load is not None:
            loads.setdefault(k, []).append(load)
    base = Baseline.objects.create(
        name=f"rolling median of {len(good)} clean sweeps", source="rolling", sweeps_used=good
    )
    rows = []
    for k, v in samples.items():
        mid, mad = median_and_mad(v)
        load = median(loads[k]) if k in loads else None
        rows.append(
            BaselinePair(
                baseline=base, node_a=k[0], node_b=k[1], busbw_gbps=mid, mad_gbps=mad, samples=len(v), load=load
            )
        )
    BaselinePair.objects.bulk_create(rows, batch_size=INSERT_BATCH)
    return base


def resolve_baseline(spec: str | None, backend: str | None = None, sizes: list | None = None) -> Baseline | None:
    """The baseline a sweep is judged against: ``rolling`` (the default, over sweeps of its backend and sizes),
    ``none``, ``baseline:PK`` or ``sweep:PK``."""
    if spec is None or spec == "rolling":
        return rolling_baseline(backend=backend, sizes=sizes)
    if spec == "none":
        return None
    what, pk = spec.split(":", 1)
    if what == "baseline":
        return Baseline.objects.filter(pk=int(pk)).first()
    source = Sweep.objects.filter(pk=int(pk)).first()
    return baseline_from_sweep(source) if source else None
