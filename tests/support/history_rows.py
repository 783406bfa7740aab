"""Stored sweeps spread out in time, for the tests of the pair and node pages' history charts."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta

from django.utils import timezone

from cluster_health.models import Node, PairProbe, Sweep
from tests.support.dashboard_rows import make_sweep


def sweeps_over(
    nodes: list[Node], count: int, results: Callable[[int], dict] = lambda k: {}, step=timedelta(minutes=1), **kw
):
    """``count`` finished sweeps over ``nodes``, ``step`` apart and ending now, oldest first (make_sweep's rows);
    ``results(k)`` overrides pairs of the k-th, ``kw`` goes to every sweep's row."""
    made = []
    for k in range(count):
        sweep = make_sweep(nodes, results(k), **kw)
        at = timezone.now() - step * (count - k)
        Sweep.objects.filter(pk=sweep.pk).update(created=at, finished=at)
        PairProbe.objects.filter(sweep=sweep).update(finished=at)
        made.append(sweep)
    return made
