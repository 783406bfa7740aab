"""Shared test harness: real services started privately for the test session.

- `redis_server` / `redis_url`: a private redis-server on a free loopback port
  (never the machine's 6379); Django's broker and channel layer point at it.
- `stack`: the real server side against the test database: a Celery worker on
  queue "server", celery beat, agents started on demand, the ASGI server on
  demand. One stack per session; tests that use it are marked e2e and run with
  `django_db(transaction=True)` so the other processes see committed rows.

Everything started here is stopped at the end of the session, also when tests fail.
"""

from __future__ import annotations

import copy
import os
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from devtools import services  # noqa: E402
from tests.support.artifacts import ARTIFACTS  # noqa: E402
from tests.support.browser import chromium, viewer_page  # noqa: E402,F401  (one browser per session, shared by every browser test module)
from tests.support.stack import Stack, database_url, server_sessions_ended  # noqa: E402

# A test that reaches the database asks for one of these (pytest-django refuses any other access).
DATABASE_FIXTURES = frozenset({"db", "transactional_db", "django_db_setup", "stack"})


def pytest_addoption(parser):
    parser.addoption(
        "--database-tests-only",
        action="store_true",
        help="run only the tests that reach the database (a second database's run: the others cannot differ)",
    )


def uses_database(item) -> bool:
    """Whether the test reaches the database: its django_db mark, or a fixture that opens it."""
    return item.get_closest_marker("django_db") is not None or bool(
        DATABASE_FIXTURES.intersection(getattr(item, "fixturenames", ()))
    )


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config, items):
    """Browser tests last: Playwright's sync API keeps an event loop running in the main
    thread for the rest of the session, which Channels' async_to_sync refuses to run beside.
    With --database-tests-only, the tests that never reach the database are deselected."""
    if config.getoption("--database-tests-only"):
        kept = [item for item in items if uses_database(item)]
        config.hook.pytest_deselected(items=[item for item in items if not uses_database(item)])
        items[:] = kept
    items.sort(key=lambda item: item.get_closest_marker("browser") is not None)


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory):
    server = services.RedisServer(tmp_path_factory.mktemp("redis"))
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def redis_url(redis_server):
    """URL of a private redis-server on a free loopback port, for the whole session."""
    return redis_server.url


@pytest.fixture(scope="session", autouse=True)
def _django_uses_private_redis(request):
    """Point settings, the Celery app and the channel layer at the private Redis; on PostgreSQL, make a
    transactional test's flush take every lock first, so it never deadlocks with the live stack (tests/support/pgflush.py).

    Only for sessions that have Django configured; the agent tests need none of it.
    """
    try:
        from django.conf import settings
    except ImportError:
        yield
        return
    if not settings.configured:
        yield
        return
    if settings.DATABASES["default"]["ENGINE"].endswith("postgresql"):
        from tests.support import pgflush

        pgflush.install()
    url = request.getfixturevalue("redis_url")
    from channels.layers import channel_layers

    from cluster_health.celery import app as celery_app

    settings.REDIS_URL = url
    settings.CELERY_BROKER_URL = url
    # The configured layer (its connection options included), pointed at the private Redis.
    layer = copy.deepcopy(settings.CHANNEL_LAYERS["default"])
    layer["CONFIG"]["hosts"] = [{**h, "address": url} if isinstance(h, dict) else url for h in layer["CONFIG"]["hosts"]]
    settings.CHANNEL_LAYERS = {"default": layer}
    celery_app.conf.broker_url = url
    channel_layers.backends.clear()
    os.environ["REDIS_URL"] = url
    yield


@pytest.fixture(scope="session")
def stack(django_db_setup, django_db_blocker, redis_server, tmp_path_factory):
    """One real server side per session, against the test database and the private Redis."""
    from django.db import connection

    workdir = tmp_path_factory.mktemp("stack")
    with django_db_blocker.unblock():
        db_url = database_url(connection.settings_dict)
    # tests.settings is the production module plus the test database name and the fast
    # password hasher, so logins made by the tests work in the server processes too.
    env = services.python_env(
        DJANGO_SETTINGS_MODULE="tests.settings",
        DATABASE_URL=db_url,
        REDIS_URL=redis_server.url,
        CLUSTER_HEALTH_BROKER_URL=redis_server.url,
        CLUSTER_HEALTH_VAR_DIR=str(workdir / "var"),
        CLUSTER_HEALTH_HEARTBEAT_S="1",
        CLUSTER_HEALTH_ONLINE_AFTER_S="6",
        CLUSTER_HEALTH_REAPER_INTERVAL_S="1",
        LOG_LEVEL="INFO",
    )
    for var in ("CLUSTER_HEALTH_PRODUCTION", "DJANGO_ALLOW_ASYNC_UNSAFE"):
        env.pop(var, None)
    st = Stack(workdir, env, redis_server, django_db_blocker)
    try:
        st.start_server_worker()
        st.start_beat()
        st.watch()
        yield st
    finally:
        st.stop()
        with django_db_blocker.unblock():
            server_sessions_ended(connection)
        logs = workdir / "logs"
        if logs.is_dir():
            dest = ARTIFACTS / "stack-logs"
            dest.mkdir(parents=True, exist_ok=True)
            for f in logs.glob("*.log"):
                (dest / f.name).write_bytes(f.read_bytes()[-2_000_000:])


@pytest.fixture(autouse=True)
def _stack_keys_survive_flush(request):
    """Agents that outlive a transactional test keep their keys for the next one."""
    if "stack" in request.fixturenames:
        request.getfixturevalue("stack").restore_keys()
    yield


@pytest.fixture
def make_testbed(tmp_path):
    """Build namespace test beds (hosts on a bridge); every one is torn down after the test."""
    from tests.support.fault_bed import bed_builder

    with bed_builder(lambda i: tmp_path / f"bed{i}") as make:
        yield make


@pytest.fixture(scope="module")
def make_module_testbed(tmp_path_factory):
    """Like make_testbed, but the beds live for the whole test module (faults applied and cleared per test)."""
    from tests.support.fault_bed import bed_builder

    with bed_builder(lambda i: tmp_path_factory.mktemp("bed")) as make:
        yield make


@pytest.fixture
def memory_channel_layer(settings):
    """An in-memory channel layer, for tests that drive ingest in-process without a broker."""
    settings.CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}


@pytest.fixture
def viewer_client(client, db):
    """The test client, logged in as a viewer (no operator permission)."""
    from tests.support.dashboard_rows import make_user

    client.force_login(make_user("viewer", operator=False))
    return client


@pytest.fixture
def driver(django_capture_on_commit_callbacks):
    """Plays the agents' side of sweeps in-process: records commands, answers them (devtools/sweep_driver.py)."""
    from devtools.sweep_driver import Driver

    return Driver(django_capture_on_commit_callbacks)


@pytest.fixture
def open_pair(driver):
    """A pairs sweep of n0 and n1 waiting for its two halves: (sweep, rank 0's command, rank 1's command)."""
    from devtools.sweep_driver import heartbeat

    heartbeat("n0"), heartbeat("n1")
    sweep = driver.sweep(kind="pairs", pairs=[["n0", "n1"]], sizes=[1024])
    return sweep, *sorted(driver.take(), key=lambda c: c["rank"])


@pytest.fixture(autouse=True)
def _browser_tests_see_their_own_nodes(request):
    """A browser test starts with none of the session stack's agents running, nor their node rows.

    The end-to-end tests leave their agents (e0, e1, ...) running for the next one, and browser tests
    run last (pytest_collection_modifyitems): their heartbeats would add nodes to pages built from a
    test's stored rows (sweeps over every active node, node counts, topology groups). Stopped once,
    after the heartbeats already queued are ingested (bounded), their rows are removed.
    """
    if request.node.get_closest_marker("browser") is None or "stack" not in request.fixturenames:
        yield
        return
    stack = request.getfixturevalue("stack")
    stopped = list(stack.agents)
    if stopped:
        import time

        from cluster_health.models import Node

        request.getfixturevalue("transactional_db")
        for name in stopped:
            stack.stop_agent(name)
        time.sleep(1.5)  # the ingest consumer's batches: a heartbeat queued before the stop lands by then
        Node.objects.filter(name__in=stopped).delete()
    yield
