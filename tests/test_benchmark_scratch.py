"""benchmarks/scratch.py on PostgreSQL: a scratch database copied from a migrated template, dropped after.

Needs a PostgreSQL server on 127.0.0.1:5432 (skipped without one); each case runs in a process of its own,
since a scratch database is set up before Django is.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(180)

ROOT = Path(__file__).resolve().parent.parent
SERVER = "postgres://postgres@127.0.0.1:5432/postgres"
CHILD = f"""
import json, sys
sys.path.insert(0, {str(ROOT)!r})
from benchmarks.scratch import scratch_database, template_name
with scratch_database({SERVER!r}) as url:
    from django.db import connection
    from cluster_health.models import Node
    with connection.cursor() as cur:
        cur.execute("SELECT count(*) FROM django_migrations")
        migrations = cur.fetchone()[0]
    print("RESULT " + json.dumps({{"url": url, "nodes": Node.objects.count(), "migrations": migrations,
                                   "template": template_name()}}))
"""


def _databases() -> set[str]:
    psycopg = pytest.importorskip("psycopg")
    try:
        with psycopg.connect(SERVER, connect_timeout=3) as conn:
            return {row[0] for row in conn.execute("SELECT datname FROM pg_database")}
    except psycopg.OperationalError:
        pytest.skip("no PostgreSQL server on 127.0.0.1:5432")


def _scratch() -> dict:
    proc = subprocess.run([sys.executable, "-c", CHILD], cwd=ROOT, capture_output=True, text=True, timeout=150)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    assert proc.returncode == 0 and lines, proc.stderr[-2000:]
    return json.loads(lines[-1][len("RESULT ") :])


def test_scratch_database_is_migrated_empty_and_dropped_and_leaves_its_template():
    _databases()
    first, second = _scratch(), _scratch()
    for run in (first, second):  # the second copied from the template the first left (or found)
        assert run["migrations"] > 0 and run["nodes"] == 0
    after = _databases()
    assert first["template"] in after
    for run in (first, second):
        assert run["url"].rsplit("/", 1)[1] not in after


SQLITE_CHILD = f"""
import json, sys
sys.path.insert(0, {str(ROOT)!r})
from benchmarks.scratch import scratch_database, sqlite_template
with scratch_database(None) as url:
    from django.db import connection
    from cluster_health.models import Node
    with connection.cursor() as cur:
        cur.execute("SELECT count(*) FROM django_migrations")
        migrations = cur.fetchone()[0]
    print("RESULT " + json.dumps({{"url": url, "nodes": Node.objects.count(), "migrations": migrations,
                                   "template": str(sqlite_template())}}))
"""


def test_scratch_sqlite_file_is_copied_from_a_kept_migrated_file():
    runs = []
    for _ in range(2):
        proc = subprocess.run(
            [sys.executable, "-c", SQLITE_CHILD], cwd=ROOT, capture_output=True, text=True, timeout=150
        )
        lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
        assert proc.returncode == 0 and lines, proc.stderr[-2000:]
        runs.append(json.loads(lines[-1][len("RESULT ") :]))
    for run in runs:
        assert run["migrations"] > 0 and run["nodes"] == 0
        assert not Path(run["url"].removeprefix("sqlite:///")).exists()  # the scratch file went with its folder
    assert Path(runs[0]["template"]).is_file()
