"""What anchors the colour scales of a sweep's figure views, so a colour means the same figure from sweep to sweep.

The throughput view runs from 0 to the fleet's expected busbw: the median of the sweep's baseline
pairs, where the sweep has a baseline (else the page takes the sweep's fastest healthy pair). The
latency view runs from 0 to a multiple of the sweep's median healthy latency (heatmap.js).
"""

from __future__ import annotations

from django.core.cache import cache

from cluster_health.models import BaselinePair, Sweep

EXPECTED_CACHE_S = 24 * 3600  # a baseline's pairs are written once, with it, and never change


def expected_busbw(sweep: Sweep) -> float | None:
    """The fleet's expected busbw in GB/s: the median of the sweep's baseline pairs, None without a baseline.

    Read once per baseline (two queries over its pairs), then from the cache.
    """
    if sweep.baseline_id is None:
        return None
    key = f"cluster-health:expected-busbw:{sweep.baseline_id}"
    found = cache.get(key)
    if found is not None:
        return found
    pairs = BaselinePair.objects.filter(baseline_id=sweep.baseline_id)
    count = pairs.count()
    if not count:
        return None  # not cached: a baseline's pairs may not be written yet
    ordered = pairs.order_by("busbw_gbps").values_list("busbw_gbps", flat=True)
    middle = list(ordered[(count - 1) // 2 : count // 2 + 1])
    found = sum(middle) / len(middle)
    cache.set(key, found, EXPECTED_CACHE_S)
    return found
