"""One pair as every outside view shows it: the sweep JSON's names and roundings, in one place.

The CLI, the API, the live pushes, the stored matrix and the CSV all shape a pair here.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from django.db.models import F

from cluster_health import vocabulary
from cluster_health.core import evidence

READ_CHUNK = 20000  # pair rows per round trip when a whole sweep is read
# The pair fields every outside view reads, by PairProbe field name; ``a``/``b`` are the node names.
PAIR_FIELDS = (
    "id",
    "round",
    "a",
    "b",
    "status",
    "stage",
    "reason",
    "latency_us_p50",
    "algbw_gbps",
    "busbw_gbps",
    "hint",
    "evidence",
)
PAIR_MODEL_FIELDS = tuple(f for f in PAIR_FIELDS if f not in ("a", "b"))  # read as they are; a, b via the nodes
# Status codes of the /metrics pair gauge (the matrix has its own, with "untested", in core.matrix).
STATUS_CODES = {s: i for i, s in enumerate(vocabulary.PAIR_STATUSES)}


def pair_dict(row: Mapping[str, Any]) -> dict:
    """A pair as the sweep JSON (docs/CONTRACT.md) names it, from PairProbe field values (``latency_us_p50`` is ``latency_us``)."""
    return {
        "a": row["a"],
        "b": row["b"],
        "status": row["status"],
        "stage": row["stage"],
        "reason": row["reason"],
        "latency_us": micros(row["latency_us_p50"]),
        "algbw_gbps": gbps(row["algbw_gbps"]),
        "busbw_gbps": gbps(row["busbw_gbps"]),
        "hint": row["hint"],
        "round": row["round"],
        "probe": row["id"],
        "evidence": evidence.summary(row.get("evidence")),
    }


def pair_dict_of(p: Any) -> dict:
    """``pair_dict`` of a PairProbe instance (its nodes selected with it), or of a row read as one
    (sweeps.rounds.PendingPair)."""
    return pair_dict({**{f: getattr(p, f) for f in PAIR_MODEL_FIELDS}, "a": p.node_a.name, "b": p.node_b.name})


def pair_rows(qs, window: slice | None = None) -> Iterator[dict]:
    """``pair_dict`` of every probe in a PairProbe queryset, in round order, read as values.

    ``window`` (a slice of that order) reads one page of them, as the API does.
    """
    rows = qs.order_by("round", "id").values(*PAIR_MODEL_FIELDS, a=F("node_a__name"), b=F("node_b__name"))
    if window is not None:
        rows = rows[window]
    return (pair_dict(row) for row in rows.iterator(chunk_size=READ_CHUNK))


def gbps(x: float | None) -> float | None:
    """A bandwidth as every outside view shows it (GB/s, four decimals)."""
    return None if x is None else round(x, 4)


def micros(x: float | None) -> float | None:
    """A latency as every outside view shows it (µs, one decimal)."""
    return None if x is None else round(x, 1)
