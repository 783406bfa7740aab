"""A sweep's pair rows made in one statement on PostgreSQL are the rows ``bulk_create`` makes, in plan order."""

from __future__ import annotations

import pytest
from django.db import connection

from cluster_health.core import planner
from cluster_health.models import Node, PairProbe, Sweep
from cluster_health.sweeps import lifecycle

pytestmark = [pytest.mark.django_db, pytest.mark.timeout(120)]


@pytest.mark.skipif("connection.vendor != 'postgresql'", reason="the one-statement insert is PostgreSQL's")
def test_one_statement_insert_writes_what_bulk_create_writes():
    names = [f"r{i:02d}" for i in range(9)]  # odd: a bye each round
    Node.objects.bulk_create([Node(name=name) for name in names])
    plan = planner.plan("full", names)
    ids = dict(Node.objects.values_list("name", "pk"))
    fast = Sweep.objects.create(kind="full", backend="nccl")
    lifecycle._insert_probes(fast, plan, ids, first_round=3)
    reference = Sweep.objects.create(kind="full", backend="nccl")
    PairProbe.objects.bulk_create(
        PairProbe(sweep=reference, round=number, node_a_id=ids[a], node_b_id=ids[b], backend="nccl")
        for number, pairs in enumerate(plan.rounds, start=3)
        for a, b in pairs
    )
    fields = [f.name for f in PairProbe._meta.concrete_fields if f.name not in ("id", "sweep")]
    written = list(PairProbe.objects.filter(sweep=fast).order_by("id").values_list(*fields))
    assert written == list(PairProbe.objects.filter(sweep=reference).order_by("id").values_list(*fields))
    assert len(written) == 36 and {row[fields.index("status")] for row in written} == {"pending"}
    assert connection.vendor == "postgresql"


def test_a_plan_without_pairs_writes_nothing():
    sweep = Sweep.objects.create(kind="full")
    lifecycle._create_probes(sweep, [], planner.Plan(nodes=[]))
    assert not PairProbe.objects.filter(sweep=sweep).exists()
