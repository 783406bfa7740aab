"""A PostgreSQL flush that cannot deadlock with the live stack.

A transactional test ends with Django's flush: one ``TRUNCATE`` of every table. TRUNCATE takes
an ACCESS EXCLUSIVE lock table by table, in its own order, while the session's server worker,
beat and agents go on working: a worker transaction that holds a lock on one table and then
reads another (closing a sweep: the sweep row, then its pairs) can wait on a table the
TRUNCATE already holds while the TRUNCATE waits on the worker's: PostgreSQL then kills one of
the two ("deadlock detected"), and when that is the flush, the test errors at teardown.

Here the flush first takes every lock in one ``LOCK TABLE ... NOWAIT`` inside its transaction:
all of them or none. NOWAIT never waits, so the flush is never part of a lock cycle; while any
other transaction holds a lock the attempt rolls back (releasing what it took) and tries again
shortly after, and once it holds them all the TRUNCATE inside the same transaction waits for
nothing. The server processes wait for the flush to commit, as they would for any lock.
"""

from __future__ import annotations

import time

LOCK_NOT_AVAILABLE = "55P03"  # PostgreSQL's SQLSTATE for NOWAIT finding a lock taken
FLUSH_TIMEOUT_S = 60.0


def install() -> None:
    from django.db import OperationalError, transaction
    from django.db.backends.postgresql.operations import DatabaseOperations

    if getattr(DatabaseOperations.execute_sql_flush, "all_locks_first", False):
        return

    def execute_sql_flush(self, sql_list):
        connection = self.connection
        tables = connection.introspection.django_table_names(only_existing=True, include_views=False)
        lock = "LOCK TABLE {} IN ACCESS EXCLUSIVE MODE NOWAIT".format(", ".join(self.quote_name(t) for t in tables))
        deadline = time.monotonic() + FLUSH_TIMEOUT_S
        while True:
            try:
                with transaction.atomic(using=connection.alias), connection.cursor() as cursor:
                    if tables:
                        cursor.execute(lock)
                    for sql in sql_list:
                        cursor.execute(sql)
                return
            except OperationalError as exc:
                if getattr(exc.__cause__, "sqlstate", None) != LOCK_NOT_AVAILABLE or time.monotonic() > deadline:
                    raise
            time.sleep(0.02)

    execute_sql_flush.all_locks_first = True  # type: ignore[attr-defined]
    DatabaseOperations.execute_sql_flush = execute_sql_flush
