"""Every query the history pages and the API make on the pair table is served by an index (PostgreSQL).

A year of nightly 1,024-node sweeps is about 190 million pair rows (docs/CONTROL_PLANE.md, "Storage"):
a page that reads the pair table by a sequential or a whole-index scan would read all of them. The test
renders the real pages and API answers with the real queries captured, and asks PostgreSQL for each one's
plan with sequential scans priced out (``enable_seqscan = off``), so that the plan shows which index
*can* serve it whatever the table's size today: every scan of the pair table must carry an index
condition. On SQLite it does not apply (the SQLite leg of the suite skips it; the PostgreSQL leg runs it).
"""

from __future__ import annotations

import json
import re

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from devtools.sweep_driver import heartbeat, result_for
from tests.support.dashboard_rows import make_user

pytestmark = [
    pytest.mark.django_db,
    pytest.mark.usefixtures("memory_channel_layer"),
    pytest.mark.skipif(connection.vendor != "postgresql", reason="query plans are PostgreSQL's (its leg runs this)"),
]

PAIR_TABLE = "cluster_health_pairprobe"
# A queryset read with .iterator() on PostgreSQL runs in a server-side cursor: the SELECT is inside it.
CURSOR = re.compile(r"\s*DECLARE\s+\S+\s+.*?CURSOR\s+(?:WITH(?:OUT)?\s+HOLD\s+)?FOR\s+(SELECT\b.*)", re.I | re.S)


def select_of(sql: str) -> str | None:
    """The SELECT a captured statement runs (also inside a DECLARE ... CURSOR FOR), else None."""
    found = CURSOR.match(sql)
    if found:
        return found.group(1)
    return sql if sql.lstrip().upper().startswith("SELECT") else None


def scans_without_condition(plan: dict) -> list[str]:
    """The pair-table scans in ``plan`` (EXPLAIN FORMAT JSON) that no index condition bounds."""
    bad = []
    if plan.get("Relation Name") == PAIR_TABLE:
        kind = plan["Node Type"]
        if kind == "Seq Scan":
            bad.append(kind)
        elif kind in ("Index Scan", "Index Only Scan") and "Index Cond" not in plan:
            bad.append(f"{kind} using {plan.get('Index Name')} (the whole index)")
        elif kind == "Bitmap Heap Scan" and "Recheck Cond" not in plan:
            bad.append(kind)
    for child in plan.get("Plans", []):
        bad += scans_without_condition(child)
    return bad


def unbounded_pair_scans(sql: str) -> list[str]:
    with connection.cursor() as cursor:
        cursor.execute("SET LOCAL enable_seqscan = off")
        cursor.execute(f"EXPLAIN (FORMAT JSON) {sql}")
        (raw,) = cursor.fetchone()
    plan = raw if isinstance(raw, list) else json.loads(raw)
    return scans_without_condition(plan[0]["Plan"])


@pytest.fixture
def year_of_history(driver):
    """Two finished full sweeps over four nodes (one link failing in the second): rows for every page."""
    names = ["n0", "n1", "n2", "n3"]
    for n in names:
        heartbeat(n)
    sweeps = []
    for bad in (None, {"n1", "n2"}):
        sweep = driver.sweep(kind="full")

        def answer(cmd, bad=bad):
            if bad and cmd["kind"] == "pair" and cmd["node"] in bad and {p["name"] for p in cmd["peers"]} == bad:
                return result_for(cmd, status="timeout", stage="connect", reason="connect_timeout")
            return result_for(cmd)

        driver.answer_all(answer)
        sweep.refresh_from_db()
        assert sweep.status == "finished"
        sweeps.append(sweep)
    return sweeps


def test_the_history_pages_and_api_read_the_pair_table_through_indexes(client, year_of_history):
    first, last = year_of_history
    client.force_login(make_user("viewer", operator=False))
    urls = [
        "/",
        "/nodes/n1/",
        "/pairs/n1/n2/",
        "/sweeps/",
        "/sweeps/?kind=full&status=finished&verdict=fail",
        "/sweeps/?node=n2",
        f"/sweeps/{last.pk}/",
        f"/sweeps/{last.pk}/report/",
        f"/sweeps/compare/?a={first.pk}&b={last.pk}",
        "/api/pairs/n1/n2/history",
        f"/api/sweeps/{last.pk}",
        f"/api/sweeps/{last.pk}/pairs",
        f"/api/sweeps/{last.pk}/matrix",
        f"/api/sweeps/{last.pk}/matrix?group=n",  # a drill-down reads the pair rows of its nodes
        f"/api/sweeps/{last.pk}/groups",
        "/api/sweeps?kind=full",
    ]
    found, readers = {}, set()
    for url in urls:
        with CaptureQueriesContext(connection) as queries:
            assert client.get(url).status_code == 200, url
        for q in queries.captured_queries:
            sql = select_of(q["sql"])
            if sql is None or PAIR_TABLE not in sql:
                continue
            readers.add(url)
            bad = unbounded_pair_scans(sql)
            if bad:
                found[f"{url}: {sql[:300]}"] = bad
    assert {"/nodes/n1/", "/pairs/n1/n2/", "/api/pairs/n1/n2/history"} <= readers, readers  # the histories
    assert f"/api/sweeps/{last.pk}/matrix?group=n" in readers, readers  # read in a server-side cursor
    assert not found, json.dumps(found, indent=1)
