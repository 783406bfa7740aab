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
"""

from __future__ import annotations

import logging
import time

from django.conf import settings
from django.db import connection

from cluster_health.models import PairProbe

log = logging.getLogger(__name__)


def worth_analyzing(pairs_written: int) -> bool:
    """Whether a sweep that wrote this many pair rows leaves the table's statistics stale enough to refresh."""
    return connection.vendor == "postgresql" and pairs_written >= settings.ANALYZE_AFTER_PAIRS


def analyze_pairs() -> float:
    """ANALYZE the pair table (PostgreSQL; nothing elsewhere); returns the seconds it took."""
    if connection.vendor != "postgresql":
        return 0.0
    started = time.monotonic()
    with connection.cursor() as cursor:
        cursor.execute(f"ANALYZE {connection.ops.quote_name(PairProbe._meta.db_table)}")
    took = time.monotonic() - started
    log.info("pair table analyzed in %.2fs", took)
    return took
