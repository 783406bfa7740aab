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
import subprocess
import sys
import threading
import time
import warnings
from contextlib import contextmanager
from pathlib import Path

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from devtools import services  # noqa: E402
from tests.browser import chromium, viewer_page  # noqa: E402,F401  (one browser per session, shared by every browser test module)

ARTIFACTS = Path(os.environ.get("CLUSTER_HEALTH_TEST_ARTIFACTS", Path(ROOT) / "test-artifacts"))


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(items):
    """Browser tests last: Playwright's sync API keeps an event loop running in the main
    thread for the rest of the session, which Channels' async_to_sync refuses to run beside."""
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
    transactional test's flush take every lock first, so it never deadlocks with the live stack (tests/pgflush.py).

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
        from tests import pgflush

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


def _database_url(settings_dict: dict) -> str:
    engine = settings_dict["ENGINE"]
    if engine.endswith("sqlite3"):
        return f"sqlite:///{settings_dict['NAME']}"
    user = settings_dict.get("USER") or ""
    password = settings_dict.get("PASSWORD") or ""
    auth = f"{user}:{password}@" if password else (f"{user}@" if user else "")
    host = settings_dict.get("HOST") or "127.0.0.1"
    port = settings_dict.get("PORT") or 5432
    return f"postgres://{auth}{host}:{port}/{settings_dict['NAME']}"


# How long PostgreSQL may take to end the sessions of server processes just stopped (a killed
# client's backend exits when it notices the closed socket), before the test database is dropped.
SESSIONS_END_S = 15.0


def _server_sessions_ended(connection) -> None:
    """Wait until no other session uses the test database (PostgreSQL), so that dropping it succeeds."""
    if connection.vendor != "postgresql":
        return
    deadline = time.monotonic() + SESSIONS_END_S
    while True:
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT pid, application_name, state, client_port, left(query, 120) FROM pg_stat_activity "
                "WHERE datname = current_database() AND pid <> pg_backend_pid()"
            )
            others = cursor.fetchall()
        if not others:
            return
        if time.monotonic() > deadline:
            # The database is dropped next whatever holds it: end those sessions, and say whose they were.
            owners = {port: _local_owner(port) for _, _, _, port, _ in others}
            with connection.cursor() as cursor:
                for pid, *_ in others:
                    cursor.execute("SELECT pg_terminate_backend(%s)", [pid])
            warnings.warn(
                f"sessions still open on the test database after the stack stopped, ended: {others}; "
                f"their clients: {owners}",
                stacklevel=2,
            )
            return
        time.sleep(0.2)


def _local_owner(port) -> str:
    """The local process (pid and command) holding a TCP connection from ``port``, as ss names it."""
    if not port:
        return "?"
    try:
        out = subprocess.run(["ss", "-Htnp", f"sport = :{port}"], capture_output=True, text=True, timeout=5).stdout
    except (OSError, subprocess.SubprocessError):
        return "?"
    return out.strip()[-200:] or "gone"


class Stack:
    """The real server side for e2e tests: worker, beat, agents and (on demand) the web server."""

    def __init__(self, workdir: Path, env: dict, redis_server: services.RedisServer, db_blocker=None):
        self.workdir, self.env, self.redis, self.db_blocker = workdir, env, redis_server, db_blocker
        self.keys: dict[str, object] = {}  # node name -> signing.NodeKey enrolled for this session
        self.sup = services.Supervisor(workdir / "logs", env)
        self.agents: dict[str, str] = {}
        self.web_url: str | None = None

    # server side
    def start_server_worker(self) -> None:
        self.sup.start("worker", services.server_worker_args("server@test"), restart=True)

    def restart_server_worker(self) -> None:
        self.sup.stop("worker")
        self.start_server_worker()

    def start_beat(self) -> None:
        self.sup.start("beat", services.beat_args(self.workdir), restart=True)

    def watch(self) -> None:
        """Restart server processes that exit on their own, as a deployment's process manager does."""
        self._watching = threading.Event()

        def loop():
            while not self._watching.wait(0.5):
                self.sup.revive()

        threading.Thread(target=loop, name="stack-supervisor", daemon=True).start()

    def start_web(self) -> str:
        if self.web_url and self.sup.alive("web"):
            return self.web_url
        port = services.free_port()
        proc = self.sup.start("web", services.web_args("127.0.0.1", port))
        services.wait_for_port("127.0.0.1", port, 30, proc)
        self.web_url = f"http://127.0.0.1:{port}"
        self._web_port = port
        return self.web_url

    def restart_web(self, while_down=None) -> str:
        """Restart the ASGI server on the same port (a browser page stays open across it).

        ``while_down()``, if given, runs after the server stopped and before it starts again.
        """
        port = self._web_port
        self.sup.stop("web")
        if while_down is not None:
            while_down()
        proc = self.sup.start("web", services.web_args("127.0.0.1", port))
        services.wait_for_port("127.0.0.1", port, 30, proc)
        return self.web_url

    # agents: enrolled as a deployment enrols them, so every e2e message is signed
    def key_file(self, name: str) -> Path:
        """Enrol a node (once per session) and return its key file."""
        from agents import signing

        path = self.workdir / "keys" / f"{name}.key"
        if name not in self.keys:
            path.parent.mkdir(mode=0o700, exist_ok=True)
            self.keys[name] = signing.new_key(name)
            signing.write_key_file(path, self.keys[name])
        self.restore_keys()
        return path

    def restore_keys(self) -> None:
        """Store the session's keys again: transactional tests flush every table, AgentKey included."""
        from cluster_health.models import AgentKey

        if not self.keys:
            return
        with self.db_blocker.unblock():
            AgentKey.objects.bulk_create([AgentKey.sealed(key) for key in self.keys.values()], ignore_conflicts=True)

    def start_agent(self, name: str, address: str = "127.0.0.1", env: dict | None = None) -> None:
        self.sup.start(
            f"agent-{name}", services.agent_args(name, address, self.redis.url, self.key_file(name)), env=env
        )
        self.agents[name] = address

    def stop_agent(self, name: str, sig: int = 15) -> None:
        self.sup.stop(f"agent-{name}", sig=sig)
        self.agents.pop(name, None)

    def agent_alive(self, name: str) -> bool:
        return self.sup.alive(f"agent-{name}")

    def log(self, name: str) -> str:
        return self.sup.log(name)

    def stop(self) -> None:
        if getattr(self, "_watching", None) is not None:
            self._watching.set()
        self.sup.stop_all()


@pytest.fixture(scope="session")
def stack(django_db_setup, django_db_blocker, redis_server, tmp_path_factory):
    """One real server side per session, against the test database and the private Redis."""
    from django.db import connection

    workdir = tmp_path_factory.mktemp("stack")
    with django_db_blocker.unblock():
        db_url = _database_url(connection.settings_dict)
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
            _server_sessions_ended(connection)
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


def _testbed_or_skip():
    from devtools import testbed

    reason = testbed.available()
    if reason:
        if os.environ.get("CI"):
            pytest.fail(f"CI must run the namespace test bed, but: {reason}")
        pytest.skip(f"namespace test bed unavailable: {reason}")
    return testbed


def _close_beds(beds) -> None:
    """Tear the beds down and keep their agents' logs with the test artifacts."""
    for bed in beds:
        bed.close()
        for log in bed.workdir.glob("*.log"):
            dest = ARTIFACTS / "testbed-logs"
            dest.mkdir(parents=True, exist_ok=True)
            (dest / f"{bed.tag}-{log.name}").write_bytes(log.read_bytes()[-1_000_000:])


@contextmanager
def _bed_builder(workdir_for):
    """A bed builder (hosts, **TestBed options) whose beds are all torn down when the block ends."""
    make, made = _beds(workdir_for)
    try:
        yield make
    finally:
        _close_beds(made)


def _beds(workdir_for):
    """A bed builder (hosts, **TestBed options) and the list of beds it made, for _close_beds."""
    testbed = _testbed_or_skip()
    testbed.cleanup_stale()
    made = []

    def make(hosts: int = 4, **kwargs):
        bed = testbed.TestBed(hosts, workdir=workdir_for(len(made)), **kwargs)
        made.append(bed)
        return bed.build()

    return make, made


@pytest.fixture
def make_testbed(tmp_path):
    """Build namespace test beds (hosts on a bridge); every one is torn down after the test."""
    with _bed_builder(lambda i: tmp_path / f"bed{i}") as make:
        yield make


@pytest.fixture(scope="module")
def make_module_testbed(tmp_path_factory):
    """Like make_testbed, but the beds live for the whole test module (faults applied and cleared per test)."""
    with _bed_builder(lambda i: tmp_path_factory.mktemp("bed")) as make:
        yield make


@pytest.fixture
def memory_channel_layer(settings):
    """An in-memory channel layer, for tests that drive ingest in-process without a broker."""
    settings.CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}


@pytest.fixture
def viewer_client(client, db):
    """The test client, logged in as a viewer (no operator permission)."""
    from tests.dashboard_rows import make_user

    client.force_login(make_user("viewer", operator=False))
    return client


@pytest.fixture
def driver(django_capture_on_commit_callbacks):
    """Plays the agents' side of sweeps in-process: records commands, answers them (tests/sweep_driver.py)."""
    from devtools.sweep_driver import Driver

    return Driver(django_capture_on_commit_callbacks)


@pytest.fixture
def open_pair(driver):
    """A pairs sweep of n0 and n1 waiting for its two halves: (sweep, rank 0's command, rank 1's command)."""
    from devtools.sweep_driver import heartbeat

    heartbeat("n0"), heartbeat("n1")
    sweep = driver.sweep(kind="pairs", pairs=[["n0", "n1"]], sizes=[1024])
    return sweep, *sorted(driver.take(), key=lambda c: c["rank"])
