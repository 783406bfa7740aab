"""A throwaway database for a benchmark: a uniquely named PostgreSQL database, or a SQLite file.

``scratch_database(url)`` creates it, points Django at it (``DATABASE_URL``),
migrates, yields, and drops it afterwards, so a benchmark never touches the
real database. Django must not be set up before it is entered.

On PostgreSQL the scratch database is copied from a migrated template
(``CREATE DATABASE ... TEMPLATE``, about a second) instead of migrated from empty
(20 s on a loaded 2-core machine). The template is named after a hash of the
migrations and Django's version (``ch_bench_tpl_<hash>``), so a change to either
makes a new one; the first benchmark after such a change migrates its scratch
database and copies it into the new template, dropping older templates. ``migrate``
still runs on the copy (nothing to apply: it only checks). A scratch SQLite file is
copied the same way from a migrated file kept in the system's temporary folder
(``ch-bench-templates/<the same name>.sqlite3``).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
import uuid
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

ROOT = Path(__file__).resolve().parent.parent
TEMPLATE_PREFIX = "ch_bench_tpl_"


def template_name() -> str:
    """The template database for the migrations in this checkout (and this Django)."""
    import django

    digest = hashlib.sha256(django.get_version().encode())
    for path in sorted((ROOT / "cluster_health").glob("**/migrations/*.py")):
        digest.update(path.relative_to(ROOT).as_posix().encode() + b"\0" + path.read_bytes())
    return TEMPLATE_PREFIX + digest.hexdigest()[:16]


def _from_template(conn, name: str, template: str) -> bool:
    """Create ``name`` as a copy of ``template``; False where there is no such template (or it is busy)."""
    import psycopg

    exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (template,)).fetchone()
    if not exists:
        return False
    try:
        conn.execute(f'CREATE DATABASE "{name}" TEMPLATE "{template}"')
    except psycopg.errors.ObjectInUse:  # another benchmark is copying it right now
        return False
    return True


def _keep_as_template(admin: str, name: str, template: str) -> None:
    """Copy the freshly migrated ``name`` into ``template`` and drop older templates; a race with another
    benchmark doing the same, or a busy older template, only means this one is not kept."""
    import psycopg
    from django.db import connections

    connections.close_all()  # a template must have no session open on it
    with psycopg.connect(admin, autocommit=True) as conn:
        try:
            conn.execute(f'CREATE DATABASE "{template}" TEMPLATE "{name}"')
        except (psycopg.errors.DuplicateDatabase, psycopg.errors.ObjectInUse, psycopg.errors.UniqueViolation):
            return
        old = conn.execute(
            "SELECT datname FROM pg_database WHERE datname LIKE %s AND datname <> %s", (TEMPLATE_PREFIX + "%", template)
        ).fetchall()
        for (stale,) in old:
            try:
                conn.execute(f'DROP DATABASE IF EXISTS "{stale}"')
            except psycopg.errors.ObjectInUse:
                pass


def sqlite_template() -> Path:
    """Where a migrated SQLite database for these migrations is kept between runs (the system's temporary folder)."""
    return Path(tempfile.gettempdir()) / "ch-bench-templates" / f"{template_name()}.sqlite3"


def sqlite_from_template(path: Path) -> bool:
    """Copy the migrated SQLite template to ``path``; False where there is none yet."""
    template = sqlite_template()
    if not template.is_file():
        return False
    shutil.copyfile(template, path)
    return True


def keep_sqlite_template(path: Path) -> None:
    """Keep the freshly migrated SQLite database at ``path`` as the template (written whole, then renamed in)."""
    from django.db import connections

    connections.close_all()
    template = sqlite_template()
    template.parent.mkdir(parents=True, exist_ok=True)
    partial = template.with_suffix(f".{os.getpid()}.partial")
    shutil.copyfile(path, partial)
    os.replace(partial, template)


@contextmanager
def scratch_database(server_url: str | None):
    """``server_url``: a postgres:// URL whose server gets a scratch database, or None for SQLite."""
    workdir = tempfile.mkdtemp(prefix="ch-bench-")
    name = admin = template = ""
    copied = False
    if server_url:
        import psycopg

        parts = urlsplit(server_url)
        name = f"ch_bench_{os.getpid()}_{uuid.uuid4().hex[:8]}"
        admin = urlunsplit(parts._replace(path="/postgres"))
        template = template_name()
        with psycopg.connect(admin, autocommit=True) as conn:
            copied = _from_template(conn, name, template)
            if not copied:
                conn.execute(f'CREATE DATABASE "{name}"')
        url = urlunsplit(parts._replace(path=f"/{name}"))
    else:
        url = f"sqlite:///{workdir}/bench.sqlite3"
        copied = sqlite_from_template(Path(workdir) / "bench.sqlite3")
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
        if name and not copied:
            _keep_as_template(admin, name, template)
        elif not name and not copied:
            keep_sqlite_template(Path(workdir) / "bench.sqlite3")
        yield url
    finally:
        from django.db import connections

        connections.close_all()
        if name:
            import psycopg

            with psycopg.connect(admin, autocommit=True) as conn:
                conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        shutil.rmtree(workdir, ignore_errors=True)
