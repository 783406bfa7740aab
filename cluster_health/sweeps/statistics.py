"""Fresh planner statistics for the pair table once a large sweep has closed (PostgreSQL).

A sweep rewrites each of its pair rows three or four times within minutes (running, sent,
its halves, closed).
PostgreSQL's autovacuum analyzes a table only after a tenth of it has changed, at its next
look, so a sweep that has just closed is read with statistics from before it was written:
the planner then misjudges the sweep's rows, and a 128-node drill-down into a 4,096-node
sweep took 290 ms where it takes 54 ms once the table is analyzed (docs/DASHBOARD.md). A
sweep that just closed is the one an operator opens, so the server analyzes the table in a
task of its own as soon as such a sweep closes. ANALYZE reads a fixed sample, however large
the table, and blocks neither readers nor writers.

The same rewrites leave dead row versions, three or four per pair, which only VACUUM
clears. Until it does, every scan for running probes (the reaper's deadlines, the
outbox) steps over every row ever marked running: a 1,024-node sweep on a server with
autovacuum off went from 2.2 s a round to 3.45 s by round 580, with 1.25 million dead
versions, and a VACUUM brought it back to 2.4 s (docs/BENCHMARKS.md). Autovacuum, where
it is on, waits for a fifth of the table to be dead, which a year of history puts far
past one sweep's churn. So the reaper's pass vacuums the pair table itself once it holds
VACUUM_AFTER_DEAD_PAIRS dead versions (``vacuum_if_churned``), one worker at a time, and
leaves it to autovacuum when that holds the table. VACUUM blocks neither readers nor
writers.
"""

from __future__ import annotations

import logging
import time

from django.conf import settings
from django.db import OperationalError, connection

from cluster_health.models import PairProbe

log = logging.getLogger(__name__)
VACUUM_LOCK = "cluster_health: vacuum of the pair table"  # one reaper at a time (an advisory lock)
VACUUM_LOCK_WAIT_S = 1  # for the table's lock: autovacuum holding it is doing the same work
LOCK_NOT_AVAILABLE = "55P03"  # PostgreSQL's code for a lock_timeout that ran out


def worth_analyzing(pairs_written: int) -> bool:
    """Whether a sweep that wrote this many pair rows leaves the table's statistics stale enough to refresh."""
    return connection.vendor == "postgresql" and pairs_written >= settings.ANALYZE_AFTER_PAIRS


def _table() -> str:
    return connection.ops.quote_name(PairProbe._meta.db_table)


def dead_pairs() -> int:
    """Dead row versions in the pair table, as PostgreSQL's statistics count them (0 elsewhere)."""
    if connection.vendor != "postgresql":
        return 0
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_stat_clear_snapshot()")  # this session's cached view, if any, is dropped
        cursor.execute("SELECT n_dead_tup FROM pg_stat_user_tables WHERE relid = %s::regclass", [_table()])
        row = cursor.fetchone()
    return int(row[0]) if row else 0


def vacuum_if_churned() -> float | None:
    """VACUUM the pair table if it holds VACUUM_AFTER_DEAD_PAIRS dead versions or more (PostgreSQL);
    returns the seconds it took, or None when it was not needed or another vacuum has the table.
    Runs outside any transaction."""
    dead = dead_pairs()
    if dead < settings.VACUUM_AFTER_DEAD_PAIRS:
        return None
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_try_advisory_lock(hashtext(%s))", [VACUUM_LOCK])
        if not cursor.fetchone()[0]:
            return None  # another worker's reaper is vacuuming it
        try:
            cursor.execute("SET lock_timeout = %s", [f"{VACUUM_LOCK_WAIT_S}s"])
            started = time.monotonic()
            try:
                cursor.execute(f"VACUUM {_table()}")
            except OperationalError as exc:
                if getattr(exc.__cause__, "sqlstate", None) != LOCK_NOT_AVAILABLE:
                    raise  # not the lock wait: a real failure, for the task's log
                log.info("pair table not vacuumed: another vacuum holds it (%d dead row versions)", dead)
                return None  # autovacuum has the table: it is doing the work
            finally:
                cursor.execute("RESET lock_timeout")
        finally:
            cursor.execute("SELECT pg_advisory_unlock(hashtext(%s))", [VACUUM_LOCK])
    took = time.monotonic() - started
    log.info("pair table vacuumed in %.2fs (%d dead row versions)", took, dead)
    return took


def analyze_pairs() -> float:
    """ANALYZE the pair table (PostgreSQL; nothing elsewhere); returns the seconds it took."""
    if connection.vendor != "postgresql":
        return 0.0
    started = time.monotonic()
    with connection.cursor() as cursor:
        cursor.execute(f"ANALYZE {_table()}")
    took = time.monotonic() - started
    log.info("pair table analyzed in %.2fs", took)
    return took
