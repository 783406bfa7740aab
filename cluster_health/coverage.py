"""Coverage: when each pair of the fleet was last measured, and how much of the fleet a week of sweeps covered.

A pair is measured when a sweep gave it a final outcome that says something about the link
(anything but ``offline`` and ``skipped``). ``record`` keeps the newest such time per pair
(PairCoverage), after each sweep; ``summary`` is what ``GET /api/coverage`` and the
dashboard's panel show; ``staleness`` weighs pairs for the idle-gap sweeps' choice
(``cluster_health.sweeps.idle.choose``).
"""

from __future__ import annotations

from datetime import datetime, timedelta

from django.db.models import Q
from django.utils import timezone

from cluster_health.core import matrix
from cluster_health.models import IN_SERVICE, Node, PairCoverage, PairProbe, Sweep, pair_key

UNMEASURED = ("pending", "running", "offline", "skipped")
WRITE_BATCH = 5000
STALEST_LISTED = 20
NEVER_AGE_S = 10 * 365 * 86400.0  # a pair never measured weighs as one measured ten years ago


def record(sweep: Sweep) -> int:
    """Note this sweep's measured pairs as measured at their probe's end; a newer measurement is kept. Idempotent."""
    when = sweep.finished or timezone.now()
    latest: dict[tuple[str, str], tuple] = {}
    rows = (
        PairProbe.objects.filter(sweep=sweep)
        .exclude(status__in=UNMEASURED)
        .values_list("node_a__name", "node_b__name", "status", "finished")
    )
    for a, b, status, finished in rows.iterator(chunk_size=WRITE_BATCH):
        key = pair_key(a, b)
        at = finished or when
        if key not in latest or at >= latest[key][0]:
            latest[key] = (at, status)
    if not latest:
        return 0
    # A late task must not put a pair's time back: the pairs measured since keep theirs.
    newer = set(PairCoverage.objects.filter(last_measured__gt=when).values_list("node_a", "node_b"))
    batch = [
        PairCoverage(node_a=a, node_b=b, last_measured=at, sweep_id=sweep.pk, status=status)
        for (a, b), (at, status) in latest.items()
        if (a, b) not in newer
    ]
    for i in range(0, len(batch), WRITE_BATCH):
        PairCoverage.objects.bulk_create(
            batch[i : i + WRITE_BATCH],
            update_conflicts=True,
            unique_fields=["node_a", "node_b"],
            update_fields=["last_measured", "sweep", "status"],
        )
    return len(batch)


def fleet() -> list[str]:
    """The nodes coverage is counted over: active and in service, in natural order."""
    names = Node.objects.filter(active=True, state=IN_SERVICE).values_list("name", flat=True)
    return sorted(names, key=matrix.natural_key)


def last_measured(names: list[str]) -> dict[tuple[str, str], datetime]:
    """pair_key -> when it was last measured, for the pairs among ``names`` ever measured."""
    wanted = set(names)
    rows = (
        PairCoverage.objects.filter(node_a__in=wanted, node_b__in=wanted)
        if len(wanted) < 1000
        else (PairCoverage.objects.all())
    )
    return {
        (a, b): t for a, b, t in rows.values_list("node_a", "node_b", "last_measured") if a in wanted and b in wanted
    }


def stalest_first(names: list[str], measured: dict | None = None) -> list[tuple[str, str]]:
    """Every pair among ``names``, never measured first, then the longest ago (ties in node order)."""
    measured = last_measured(names) if measured is None else measured
    order = {n: i for i, n in enumerate(names)}
    pairs = [pair_key(a, b) for i, a in enumerate(names) for b in names[i + 1 :]]
    epoch = timezone.now() - timedelta(days=365 * 100)
    return sorted(
        pairs, key=lambda p: (measured.get(p) is not None, measured.get(p) or epoch, order[p[0]], order[p[1]])
    )


def _weigher(measured: dict, now: datetime, power: float):
    """Weigh a row of pairs by age (see ``staleness``): ``row(a, others)`` -> each pair (a, b)'s weight."""
    at = now.timestamp()
    weights: dict = {None: NEVER_AGE_S**power}  # by measured time: many pairs share a sweep's time

    def weigh(t) -> float:
        weights[t] = x = max(at - t.timestamp(), 0.0) ** power
        return x

    def row(a: str, others: list[str]) -> list[float]:
        times = [measured.get((a, b) if a <= b else (b, a)) for b in others]
        return [weights[t] if t in weights else weigh(t) for t in times]

    return row


def staleness(names: list[str], measured: dict, now: datetime, power: float = 2.0) -> list[list[float]]:
    """The pairs among ``names`` weighed by how long ago each was measured: ``w[i][j]`` (= ``w[j][i]``) is its age
    in seconds to the ``power`` (NEVER_AGE_S for one never measured, 0 on the diagonal). Squared, by default:
    one pair twice as stale outweighs three half as stale, so a choice that sums the weights reaches the oldest
    pairs first and the merely old ones with them."""
    row = _weigher(measured, now, power)
    upper = [row(a, names[i + 1 :]) for i, a in enumerate(names)]  # each pair looked up once
    return [[upper[j][i - j - 1] for j in range(i)] + [0.0] + upper[i] for i in range(len(names))]


def staleness_to(names: list[str], others: list[str], measured: dict, now: datetime, power: float = 2.0) -> list[float]:
    """Each of ``names``' pairs with ``others`` weighed as ``staleness`` does, summed: how far behind each is."""
    row = _weigher(measured, now, power)
    return [sum(row(a, [b for b in others if b != a])) for a in names]


def summary(now=None, listed: int = STALEST_LISTED, names: list[str] | None = None) -> dict:
    """The fleet's coverage: pairs measured within a day and a week, the stalest, each node's last full measurement.

    ``names``: the fleet (``fleet()``) where the caller has already read it."""
    now = now or timezone.now()
    names = fleet() if names is None else names
    measured = last_measured(names)
    total = len(names) * (len(names) - 1) // 2
    day, week = now - timedelta(days=1), now - timedelta(days=7)
    within_day = sum(1 for t in measured.values() if t >= day)
    within_week = sum(1 for t in measured.values() if t >= week)
    oldest: dict[str, datetime] = {}
    count: dict[str, int] = dict.fromkeys(names, 0)
    for (a, b), t in measured.items():
        for n in (a, b):
            count[n] += 1
            if n not in oldest or t < oldest[n]:
                oldest[n] = t
    stalest = stalest_first(names, measured)[:listed] if total <= 200_000 else _stalest_measured(measured, listed)
    return {
        "now": now.isoformat(),
        "nodes_total": len(names),
        "pairs_total": total,
        "pairs_measured": len(measured),
        "within_1d": within_day,
        "within_7d": within_week,
        "share_1d": round(within_day / total, 4) if total else None,
        "share_7d": round(within_week / total, 4) if total else None,
        "stalest": [{"a": a, "b": b, "last_measured": _iso(measured.get((a, b)))} for a, b in stalest],
        "nodes": [
            {
                "name": n,
                "pairs_measured": count[n],
                "pairs_total": len(names) - 1,
                # Every pair of it measured at least once since then: the oldest of its pairs' times.
                "last_full_measurement": _iso(oldest.get(n)) if count[n] == len(names) - 1 and count[n] else None,
            }
            for n in names
        ],
    }


def _stalest_measured(measured: dict, listed: int) -> list[tuple[str, str]]:
    """Past 200,000 pairs listing the never-measured ones costs too much: the oldest measured ones instead."""
    return sorted(measured, key=lambda p: measured[p])[:listed]


def _iso(t) -> str | None:
    return t.isoformat() if t else None


def node_last_measured(name: str):
    """When any pair of the node was last measured (None if never)."""
    row = PairCoverage.objects.filter(Q(node_a=name) | Q(node_b=name)).order_by("-last_measured").first()
    return row.last_measured if row else None
