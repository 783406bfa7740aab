"""A gang check's quick sweep prefers the pairs measured longest ago: the checks before jobs also cover the pairs of
busy nodes, which idle-gap sweeps reach last (benchmarks/coverage.py measures what that buys)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from cluster_health.core import planner
from cluster_health.models import PairCoverage, PairProbe, pair_key
from cluster_health.sweeps.request import SweepRequestError, clean_request
from devtools.sweep_driver import heartbeat

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("memory_channel_layer")]

NODES = [f"gang{i}" for i in range(1, 7)]


def probed(sweep) -> list[set[tuple[str, str]]]:
    rows = PairProbe.objects.filter(sweep=sweep).values_list("round", "node_a__name", "node_b__name")
    rounds: dict[int, set[tuple[str, str]]] = {}
    for k, a, b in rows:
        rounds.setdefault(k, set()).add(pair_key(a, b))
    return [rounds[k] for k in sorted(rounds)]


def test_a_quick_sweep_asked_for_the_stalest_pairs_measures_the_never_measured_and_oldest_first(driver):
    for n in NODES:
        heartbeat(n)
    now = timezone.now()
    stale = {pair_key("gang1", "gang4"): now - timedelta(days=9), pair_key("gang2", "gang6"): now - timedelta(days=8)}
    never = pair_key("gang3", "gang5")
    PairCoverage.objects.bulk_create(
        PairCoverage(node_a=a, node_b=b, last_measured=stale.get((a, b), now - timedelta(hours=1)), status="ok")
        for i, x in enumerate(NODES)
        for y in NODES[i + 1 :]
        if (a := pair_key(x, y)[0], b := pair_key(x, y)[1]) != never
    )
    sweep = driver.sweep(kind="quick", nodes=NODES, stalest_first=True)
    rounds = probed(sweep)
    assert len(rounds) == 2
    assert {never, *stale} <= rounds[0]  # the never measured, then the oldest, in the first round
    assert all(len({n for p in r for n in p}) == len(NODES) for r in rounds)  # every node in every round
    driver.answer_all()
    sweep.refresh_from_db()
    assert sweep.status == "finished", sweep.error
    plain = driver.sweep(kind="quick", nodes=NODES)  # not asked: the circle rounds, in the nodes' order
    assert probed(plain) == [{pair_key(a, b) for a, b in r} for r in planner.circle_rounds(NODES, limit=2)]


def test_only_a_quick_sweep_takes_stalest_first_and_only_as_true():
    assert clean_request(kind="quick", nodes=NODES, stalest_first=True)["params"]["stalest_first"] is True
    for kind, value in (("full", True), ("quick", "yes"), ("quick", 1)):
        with pytest.raises(SweepRequestError, match="stalest_first"):
            clean_request(kind=kind, nodes=NODES, stalest_first=value)
