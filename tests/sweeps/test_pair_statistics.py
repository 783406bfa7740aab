"""A large sweep has the pair table analyzed as it closes (PostgreSQL), so the sweep an operator
opens next is read with statistics that know its rows (cluster_health/sweeps/statistics.py)."""

from __future__ import annotations

import pytest
from django.db import connection

from cluster_health import tasks, vocabulary
from cluster_health.models import PairProbe
from devtools.sweep_driver import heartbeat

POSTGRES = connection.vendor == "postgresql"


@pytest.mark.django_db
@pytest.mark.usefixtures("memory_channel_layer")
@pytest.mark.parametrize(("threshold", "wanted"), [(6, True), (7, False)])
def test_a_sweep_of_at_least_the_threshold_of_pairs_asks_for_fresh_statistics(driver, settings, threshold, wanted):
    settings.ANALYZE_AFTER_PAIRS = threshold
    for name in ("n0", "n1", "n2", "n3"):
        heartbeat(name)
    sweep = driver.sweep(kind="connectivity")  # four nodes: six pairs
    driver.answer_all()
    sweep.refresh_from_db()
    assert (sweep.status, PairProbe.objects.filter(sweep=sweep).count()) == ("finished", 6)
    asked = [task for task, _ in driver.server_tasks if task == vocabulary.TASK_ANALYZE_PAIRS]
    # SQLite keeps no statistics the planner would miss: nothing is asked there.
    assert asked == ([vocabulary.TASK_ANALYZE_PAIRS] if wanted and POSTGRES else [])


def last_analyzed(what: str = "analyze"):
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_stat_clear_snapshot()")  # this session's cached view of the statistics
        cursor.execute(f"SELECT last_{what} FROM pg_stat_user_tables WHERE relname = %s", [PairProbe._meta.db_table])
        return cursor.fetchone()[0]


@pytest.mark.django_db(transaction=True)
@pytest.mark.skipif(not POSTGRES, reason="planner statistics are PostgreSQL's (its leg runs this)")
def test_the_task_analyzes_the_pair_table():
    before = last_analyzed()
    assert tasks.analyze_pairs() >= 0
    after = last_analyzed()
    assert after is not None and (before is None or after > before)


@pytest.fixture
def no_autovacuum():
    """The pair table without PostgreSQL's autovacuum for the test: a daemon's vacuum of it, started at any moment
    by earlier tests' churn, would reset the dead-version count or hold the table while the test asks ours.

    And a snapshot held open in another session throughout: without it any statement that reads a page of the
    table (the leg's server stack, the test's own) may prune the test's dead versions and take them off the
    count between two of its calls, and the reaper then rightly finds nothing to vacuum."""
    if not POSTGRES:
        yield
        return
    table = PairProbe._meta.db_table
    with connection.cursor() as cursor:
        cursor.execute(f'ALTER TABLE "{table}" SET (autovacuum_enabled = false)')
    pin = connection.get_new_connection(connection.get_connection_params())
    pin.autocommit = False
    try:
        with pin.cursor() as cursor:
            cursor.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
            cursor.execute("SELECT 1")  # the snapshot: versions dead after it stay until it ends
        yield
    finally:
        pin.rollback()
        pin.close()
        with connection.cursor() as cursor:
            cursor.execute(f'ALTER TABLE "{table}" RESET (autovacuum_enabled)')


def dead_versions(n: int) -> None:
    """n dead row versions in the pair table: rows rewritten as a sweep rewrites them, counted at once.

    The sweep is finished, so the reaper has nothing of its own to rewrite in it."""
    for name in ("n0", "n1"):
        heartbeat(name)
    from cluster_health.models import Node, Sweep

    a, b = Node.objects.order_by("name")
    sweep = Sweep.objects.create(kind="connectivity", status="finished", nodes=["n0", "n1"])
    PairProbe.objects.bulk_create(PairProbe(sweep=sweep, round=1, node_a=a, node_b=b) for _ in range(n))
    PairProbe.objects.filter(sweep=sweep).update(status="ok")  # each row's first version is now dead
    if POSTGRES:
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_stat_force_next_flush()")  # this session's counts reach the statistics now


@pytest.mark.django_db(transaction=True)  # VACUUM runs outside any transaction
def test_the_reaper_vacuums_the_pair_table_once_it_holds_enough_dead_versions(settings, no_autovacuum):
    from cluster_health.sweeps import statistics

    dead_versions(50)
    if not POSTGRES:  # SQLite keeps no such count and has no VACUUM to run between sweeps' writes
        settings.VACUUM_AFTER_DEAD_PAIRS = 1
        assert (statistics.dead_pairs(), statistics.vacuum_if_churned()) == (0, None)
        return
    assert statistics.dead_pairs() >= 50
    before = last_analyzed("vacuum")
    # Far above the count: other sessions (the stack's server worker, earlier tests' connections)
    # flush the dead versions they made whenever they go idle, so the count may grow meanwhile.
    settings.VACUUM_AFTER_DEAD_PAIRS = statistics.dead_pairs() + 1_000_000
    tasks.reap()
    assert last_analyzed("vacuum") == before  # below the threshold: left alone
    settings.VACUUM_AFTER_DEAD_PAIRS = 50
    tasks.reap()
    after = last_analyzed("vacuum")
    assert after is not None and (before is None or after > before)


@pytest.mark.django_db(transaction=True)
@pytest.mark.skipif(not POSTGRES, reason="VACUUM and advisory locks are PostgreSQL's (its leg runs this)")
@pytest.mark.parametrize("holder", ["another reaper", "autovacuum"])
def test_a_vacuum_already_under_way_is_left_to_finish(settings, holder, no_autovacuum):
    from cluster_health.sweeps import statistics

    dead_versions(50)
    settings.VACUUM_AFTER_DEAD_PAIRS = 50
    before = last_analyzed("vacuum")
    other = connection.get_new_connection(connection.get_connection_params())
    other.autocommit = False
    try:
        with other.cursor() as cursor:
            if holder == "another reaper":
                cursor.execute("SELECT pg_advisory_lock(hashtext(%s))", [statistics.VACUUM_LOCK])
            else:  # the lock a vacuum takes on the table, held as autovacuum holds it while it works
                cursor.execute(f"LOCK TABLE {statistics._table()} IN SHARE UPDATE EXCLUSIVE MODE")
            assert statistics.vacuum_if_churned() is None
        assert last_analyzed("vacuum") == before
    finally:
        other.rollback()
        if holder == "another reaper":
            with other.cursor() as cursor:
                cursor.execute("SELECT pg_advisory_unlock_all()")
        other.close()
    assert statistics.vacuum_if_churned() is not None  # once the other is done
