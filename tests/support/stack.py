"""The real server side for e2e tests (a Celery worker on queue "server", beat, agents on demand,
the ASGI server on demand), and the PostgreSQL clean-up after it stops. The ``stack`` fixture
in tests/conftest.py builds one per session."""

from __future__ import annotations

import subprocess
import threading
import time
import warnings
from pathlib import Path

from devtools import services

# How long PostgreSQL may take to end the sessions of server processes just stopped (a killed
# client's backend exits when it notices the closed socket), before the test database is dropped.
SESSIONS_END_S = 15.0


def database_url(settings_dict: dict) -> str:
    engine = settings_dict["ENGINE"]
    if engine.endswith("sqlite3"):
        return f"sqlite:///{settings_dict['NAME']}"
    user = settings_dict.get("USER") or ""
    password = settings_dict.get("PASSWORD") or ""
    auth = f"{user}:{password}@" if password else (f"{user}@" if user else "")
    host = settings_dict.get("HOST") or "127.0.0.1"
    port = settings_dict.get("PORT") or 5432
    return f"postgres://{auth}{host}:{port}/{settings_dict['NAME']}"


def server_sessions_ended(connection) -> None:
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
