"""A large open sweep's matrix is read from a snapshot and the rows written since (shapes/matrices.py).

What an operator relies on: at every step of a sweep the matrix the pages and the API
show is the matrix its rows give, whether the reaper brought the snapshot forward or
not, for a sweep that plans rounds as it goes (bisect) too; and once the sweep closes,
its closed matrix, never a snapshot, is what is stored and served.
"""

from __future__ import annotations

import json

import pytest
from django.db import connection

from cluster_health import sweeps
from cluster_health.core import matrix
from cluster_health.models import PairProbe, Sweep, SweepMatrix
from cluster_health.retention import collapse
from cluster_health.shapes import matrices
from devtools.sweep_driver import heartbeat, result_for

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("memory_channel_layer")]


@pytest.fixture
def snapshots(monkeypatch):
    """Snapshots for sweeps of any size, brought forward by the reaper after every round."""
    monkeypatch.setattr(matrices, "SNAPSHOT_MIN_NODES", 2)
    monkeypatch.setattr(matrices, "REFRESH_PAIRS", 1)


def started(driver, n: int, kind: str = "connectivity") -> Sweep:
    """A ``kind`` sweep, started, over a fleet of ``n`` nodes (n00, n01, ...) that sent a heartbeat."""
    for i in range(n):
        heartbeat(f"n{i:02d}")
    return driver.sweep(kind=kind)


def answer_failing(bad: str):
    """Agents' answers: every pair with ``bad`` times out at connect (with a hint), the others pass at some busbw."""

    def reply(cmd):
        probe = PairProbe.objects.select_related("node_a", "node_b").get(pk=cmd["probe_id"])
        if bad in (probe.node_a.name, probe.node_b.name):
            return result_for(cmd, status="timeout", stage="connect", reason="connect_timeout", hint="firewall?")
        return result_for(cmd, busbw=1.0 + cmd["probe_id"] / 7, latency=100.0 + cmd["probe_id"] / 3)

    return reply


def answer_round(driver, sweep: Sweep, reply) -> None:
    """Answer every command out (a round's halves), then read the sweep again."""
    for cmd in driver.take():
        driver.ingest(reply(cmd))
    sweep.refresh_from_db()


def shown(sweep: Sweep) -> dict:
    return json.loads(matrices.matrix_text(sweep))


def snapshot_round(sweep: Sweep):
    return SweepMatrix.objects.filter(sweep=sweep).values_list("open_round", flat=True).first()


def drive_checking(driver, sweep: Sweep, reply, refresh: bool) -> list:
    """Answer the sweep one half at a time; after each, the open matrix must be the matrix of its rows.
    Returns the snapshot's round after each read."""
    seen = []
    for _ in range(500):
        pending = driver.take()
        if not pending:
            return seen
        for cmd in pending:
            driver.ingest(reply(cmd))
            sweep.refresh_from_db()
            if not sweep.is_open:
                continue
            assert shown(sweep) == matrices.sweep_matrix_arrays(sweep).payload()
            seen.append(snapshot_round(sweep))
            if refresh:
                driver.run(matrices.refresh_open)
    raise AssertionError("commands kept coming")


@pytest.mark.usefixtures("snapshots")
@pytest.mark.parametrize("refresh", [True, False], ids=["brought-forward", "first-snapshot-only"])
def test_an_open_sweeps_matrix_is_the_matrix_of_its_rows_at_every_step(driver, refresh):
    sweep = started(driver, 8)
    seen = drive_checking(driver, sweep, answer_failing("n03"), refresh)
    sweep.refresh_from_db()
    # 7 planned rounds, then the confirmation pass's over n03's timeouts (folded into the pairs at the end).
    assert sweep.status == "finished" and sweep.total_rounds == 7 + sweep.params["confirm_rounds"]
    assert sweep.params["confirm_rounds"] > 0
    assert None not in seen  # every open read went through a snapshot
    if refresh:  # the reaper took it forward round by round
        assert seen[-1] == sweep.total_rounds and len(set(seen)) == sweep.total_rounds
    else:  # the first read's snapshot, and every later round applied over it on read
        assert set(seen) == {1}
    stored = SweepMatrix.objects.get(sweep=sweep)
    assert stored.open_round is None and stored.open_total is None
    assert json.loads(stored.payload) == matrices.sweep_matrix_arrays(sweep).payload()
    assert matrix.status_counts(json.loads(stored.payload)) == {"ok": 21, "timeout": 7}


@pytest.mark.usefixtures("snapshots")
def test_a_bisect_sweep_that_plans_rounds_as_it_goes_reads_rightly_throughout(driver):
    sweep = started(driver, 12, "bisect")
    first_total = Sweep.objects.get(pk=sweep.pk).total_rounds
    drive_checking(driver, sweep, answer_failing("n05"), refresh=True)
    sweep.refresh_from_db()
    assert sweep.status == "finished" and sweep.total_rounds > first_total  # it planned rounds after the first
    assert json.loads(matrices.matrix_text(sweep)) == matrices.sweep_matrix_arrays(sweep).payload()


@pytest.mark.usefixtures("snapshots")
def test_a_read_takes_the_rows_of_the_rounds_since_its_snapshot_only(driver):
    sweep = started(driver, 6)
    answer_round(driver, sweep, answer_failing("none"))  # round 1 answered, round 2 dispatched
    assert sweep.current_round == 2
    driver.run(matrices.refresh_open)
    assert snapshot_round(sweep) == 2
    # Rows changed behind the server's back: round 1's is read from the snapshot, round 2's and 3's from the rows.
    early = PairProbe.objects.filter(sweep=sweep, round=1).first()
    now = PairProbe.objects.filter(sweep=sweep, round=2).first()
    later = PairProbe.objects.filter(sweep=sweep, round=3).first()
    PairProbe.objects.filter(pk__in=[early.pk, now.pk, later.pk]).update(status="failed", reason="x")
    payload = shown(sweep)
    status = matrix.decode(payload["status"], "B")

    def code(p: PairProbe) -> str:
        names = payload["nodes"]
        return matrix.STATUS_CODES[
            status[matrix.pair_index(names.index(p.node_a.name), names.index(p.node_b.name), len(names))]
        ]

    assert code(early) == "ok"
    assert code(now) == "failed"
    assert code(later) == "pending"  # round 3 has not started: its rows are not read yet


def first_round_read(driver) -> Sweep:
    """A 5-node sweep with its first round answered, read once (its snapshot taken) in its second."""
    sweep = started(driver, 5)
    answer_round(driver, sweep, answer_failing("none"))
    shown(sweep)
    return sweep


@pytest.mark.usefixtures("snapshots")
def test_a_cancelled_sweeps_snapshot_gives_way_to_its_closed_matrix(driver):
    sweep = first_round_read(driver)
    assert snapshot_round(sweep) == sweep.current_round
    driver.run(sweeps.cancel, sweep.pk)
    sweep.refresh_from_db()
    closed = shown(sweep)
    assert closed == matrices.sweep_matrix_arrays(sweep).payload() and snapshot_round(sweep) is None
    assert matrix.status_counts(closed) == {"ok": 2, "skipped": 8}
    assert matrices.closed_text(sweep.pk) == json.dumps(closed, separators=(",", ":"))
    # A snapshot written late (a reader that began while the sweep was open) never replaces it.
    assert not matrices._keep(sweep.pk, matrix.MatrixArrays.of_payload(closed), 99, 99)
    assert snapshot_round(sweep) is None
    groups = json.loads(matrices.group_matrix_text(sweep))
    assert groups["sweep"] == sweep.pk and groups["groups"]


@pytest.mark.usefixtures("snapshots")
def test_retention_stores_the_closed_matrix_in_place_of_a_snapshot_before_it_deletes_rows(driver):
    sweep = first_round_read(driver)
    driver.run(sweeps.cancel, sweep.pk)
    sweep.refresh_from_db()
    expected = matrices.sweep_matrix_arrays(sweep).payload()
    assert snapshot_round(sweep) is not None  # nobody read it since it closed
    from django.utils import timezone

    assert collapse(sweep, timezone.now()) == 2
    assert snapshot_round(sweep) is None
    assert json.loads(matrices.closed_text(sweep.pk)) == expected


def test_a_small_open_sweep_is_built_from_its_rows_without_a_snapshot(driver):
    sweep = started(driver, 4)
    assert len(sweep.nodes) < matrices.SNAPSHOT_MIN_NODES
    shown(sweep)
    driver.run(matrices.refresh_open)
    assert not SweepMatrix.objects.filter(sweep=sweep).exists()


def stored_payload_reads(queries) -> list[str]:
    return [q["sql"] for q in queries if "sweepmatrix" in q["sql"].lower() and "payload" in q["sql"].lower()]


@pytest.mark.usefixtures("snapshots")
def test_a_process_reads_over_its_last_read_not_the_stored_snapshot(driver, monkeypatch):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    monkeypatch.setattr(matrices, "_held", type(matrices._held)())
    sweep = started(driver, 6)
    reply = answer_failing("n02")
    sweep.refresh_from_db()
    shown(sweep)  # the first read: the snapshot taken, and held
    reads = 0
    while sweep.is_open:
        answer_round(driver, sweep, reply)
        if not sweep.is_open:
            break
        with CaptureQueriesContext(connection) as queries:
            assert shown(sweep) == matrices.sweep_matrix_arrays(sweep).payload()
        reads += 1
        # Neither the stored 6 MB nor the rows of rounds before the previous read's were read.
        assert not stored_payload_reads(queries.captured_queries)
        held = matrices._held[sweep.pk]
        assert (held.since, held.total) == (sweep.current_round, sweep.total_rounds)
    assert reads == sweep.total_rounds - 1 and snapshot_round(sweep) is None
    assert shown(sweep) == matrices.sweep_matrix_arrays(sweep).payload()
    assert sweep.pk not in matrices._held  # read closed: let go


@pytest.mark.usefixtures("snapshots")
def test_a_held_matrix_is_the_same_sweeps_only_and_few_are_held(driver, monkeypatch):
    monkeypatch.setattr(matrices, "_held", type(matrices._held)())
    sweep = first_round_read(driver)
    assert list(matrices._held) == [sweep.pk]
    # The same id, another sweep (a database restored over the one this process read): not its matrix.
    from datetime import timedelta

    Sweep.objects.filter(pk=sweep.pk).update(created=sweep.created - timedelta(days=1))
    sweep.refresh_from_db()
    PairProbe.objects.filter(sweep=sweep, round=1).update(status="failed", reason="restored")
    SweepMatrix.objects.filter(sweep=sweep).delete()
    assert shown(sweep) == matrices.sweep_matrix_arrays(sweep).payload()
    assert matrix.status_counts(shown(sweep))["failed"] == 2
    assert list(matrices._held) == [sweep.pk]
    others = [Sweep(pk=sweep.pk + i, created=sweep.created) for i in range(1, matrices.HELD_SWEEPS + 1)]
    for other in others:
        matrices._hold(other, matrix.MatrixArrays.blank(["a", "b"]), 1, 1)
    assert list(matrices._held) == [o.pk for o in others]  # the least recently read went first
    older = matrices._held[others[0].pk]
    matrices._hold(others[0], matrix.MatrixArrays.blank(["a", "b"]), 0, 1)  # a slower reader's older matrix
    assert matrices._held[others[0].pk] is older


def test_a_pair_looked_at_twice_shows_its_later_look_whatever_order_its_rows_lie_in():
    """The confirmation pass looks at a pair again in a later round: the matrix built from the rows (the stored
    one, small sweeps' reads, snapshots) shows that look, as an open read over a snapshot does, even where
    the first look's row was updated after the second was written (PostgreSQL then returns it after)."""
    from cluster_health.models import Node

    a, b = (Node.objects.create(name=name, address=f"10.8.0.{i}") for i, name in enumerate(("lk-a", "lk-b"), 1))
    sweep = Sweep.objects.create(kind="connectivity", nodes=["lk-a", "lk-b"], status="running", total_rounds=2)
    first = PairProbe.objects.create(sweep=sweep, round=1, node_a=a, node_b=b, status="ok", busbw_gbps=1.0)
    PairProbe.objects.create(sweep=sweep, round=2, node_a=a, node_b=b, status="degraded", busbw_gbps=2.0)
    PairProbe.objects.filter(pk=first.pk).update(hint="first look")  # a new row version, after the second look's
    if connection.vendor == "postgresql":  # read the table as it lies (the plan a large sweep's read gets)
        with connection.cursor() as cursor:
            cursor.execute("SET LOCAL enable_indexscan = off; SET LOCAL enable_bitmapscan = off")
    built = matrices.sweep_matrix_arrays(sweep).payload()
    assert matrix.status_counts(built) == {"degraded": 1}
    assert list(matrix.decode(built["busbw_gbps"], "f")) == [2.0]
