"""A throwaway database for a benchmark: a uniquely named PostgreSQL database, or a SQLite file.

``scratch_database(url)`` creates it, points Django at it (``DATABASE_URL``),
migrates, yields, and drops it afterwards, so a benchmark never touches the
real database. Django must not be set up before it is entered.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import uuid
from contextlib import contextmanager
from urllib.parse import urlsplit, urlunsplit


@contextmanager
def scratch_database(server_url: str | None):
    """``server_url``: a postgres:// URL whose server gets a scratch database, or None for SQLite."""
    workdir = tempfile.mkdtemp(prefix="ch-bench-")
    name = None
    if server_url:
        import psycopg

        parts = urlsplit(server_url)
        name = f"ch_bench_{os.getpid()}_{uuid.uuid4().hex[:8]}"
        admin = urlunsplit(parts._replace(path="/postgres"))
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        url = urlunsplit(parts._replace(path=f"/{name}"))
    else:
        url = f"sqlite:///{workdir}/bench.sqlite3"
    os.environ.update(
        DATABASE_URL=url,
        CLUSTER_HEALTH_VAR_DIR=workdir,
        DJANGO_SETTINGS_MODULE=os.environ.get("DJANGO_SETTINGS_MODULE", "cluster_health.settings"),
    )
    try:
        import django

        django.setup()
        from django.core.management import call_command

        call_command("migrate", verbosity=0)
        yield url
    finally:
        from django.db import connections

        connections.close_all()
        if name:
            import psycopg

            with psycopg.connect(admin, autocommit=True) as conn:
                conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        shutil.rmtree(workdir, ignore_errors=True)
