"""Process supervision for the one-machine stack: `scripts/run` and the test harness.

Every process runs in its own session (process group), logs to a file, and is
stopped as a group (SIGTERM, then SIGKILL) so nothing is left behind. The
command lines here are the ones a deployment runs (daphne, celery worker -Q
server, celery beat, python -m agents run): the demo and the tests exercise
exactly what users run. No Django import at module level.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping
from contextlib import suppress
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

if TYPE_CHECKING:
    import argparse
    from types import FrameType

ROOT = Path(__file__).resolve().parent.parent


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        port: int = s.getsockname()[1]
        return port


def wait_for_port(
    host: str, port: int, timeout: float, proc: subprocess.Popen[bytes] | subprocess.Popen[str] | None = None
) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            program = proc.args if isinstance(proc.args, (str, bytes, os.PathLike)) else proc.args[0]
            raise RuntimeError(f"process {os.fsdecode(program)} exited with {proc.returncode} before listening")
        try:
            with socket.create_connection((host, port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.05)
    raise TimeoutError(f"nothing listening on {host}:{port} after {timeout}s")


# What stops a command-line stack from starting: a process that exits, or a wait that runs out.
STARTUP_ERRORS = (RuntimeError, TimeoutError, subprocess.TimeoutExpired)


def refused(program: str, why: object) -> int:
    """Say on stderr why ``program`` cannot go on; the exit status it ends with."""
    print(f"{program}: {why}", file=sys.stderr)
    return 1


SLOW_STOP_S = 3.0  # a process that takes longer than this to stop is named when everything stops


def stop_process(
    proc: subprocess.Popen[bytes] | subprocess.Popen[str],
    timeout: float = 10.0,
    sig: int = signal.SIGTERM,
    group: bool = True,
) -> None:
    """Signal the process group (or, ``group=False``, its leader alone), then SIGKILL the group if it lingers
    past `timeout`.

    The leader alone is how an operator stops a Celery worker (systemd's KillMode=mixed): its
    main process finishes the tasks its pool is running, then stops the pool itself.
    """
    if proc.poll() is None:
        with suppress(ProcessLookupError):
            (os.killpg if group else os.kill)(proc.pid, sig)
        with suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=timeout)
    # The leader may be gone while children of its group live on: sweep the group.
    with suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    with suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=5)


def python_env(base: Mapping[str, str] | None = None, /, **extra: str) -> dict[str, str]:
    env = dict(os.environ if base is None else base)
    env["PYTHONPATH"] = str(ROOT) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env["PYTHONUNBUFFERED"] = "1"
    env.update({k: str(v) for k, v in extra.items()})
    return env


def stack_env(redis_url: str, var: Path, **extra: str) -> dict[str, str]:
    """The environment of every process of a one-machine stack: its settings, its broker, its var directory."""
    return python_env(
        DJANGO_SETTINGS_MODULE="cluster_health.settings",
        REDIS_URL=redis_url,
        CLUSTER_HEALTH_BROKER_URL=redis_url,
        CLUSTER_HEALTH_VAR_DIR=str(var),
        **extra,
    )


def spawn(
    args: list[str], log_path: Path, env: dict[str, str] | None = None, cwd: Path = ROOT
) -> subprocess.Popen[bytes]:
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "ab") as log:
        return subprocess.Popen(
            args,
            cwd=cwd,
            env=env if env is not None else python_env(),
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )


def run_to_end(
    args: list[str], env: dict[str, str] | None = None, timeout: float = 60, stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    """Run a command from the repository root until it exits; its output captured as text, its exit status kept.

    ``stdin``: text written to its standard input (a password, never on the command line).
    """
    env = env if env is not None else python_env()
    return subprocess.run(args, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout, input=stdin)


# The command lines, one place for the demo, the tests and the docs.


def redis_args(port: int, workdir: Path, unixsocket: Path | None = None, extra: list[str] | None = None) -> list[str]:
    """redis-server listening on loopback only, keeping nothing on disk; ``extra``: more options (ACL, TLS)."""
    exe = shutil.which("redis-server")
    if not exe:
        raise RuntimeError("redis-server is not installed: run scripts/setup, or apt-get install redis-server")
    args = [
        exe,
        "--port",
        str(port),
        "--bind",
        "127.0.0.1",
        "--save",
        "",
        "--appendonly",
        "no",
        "--dir",
        str(workdir),
        "--protected-mode",
        "yes",
    ]
    if unixsocket is not None:
        # Agents in the namespace test bed reach the broker through the shared file system.
        args += ["--unixsocket", str(unixsocket), "--unixsocketperm", "700"]
    return args + list(extra or [])


def web_args(host: str, port: int) -> list[str]:
    return [sys.executable, "-m", "daphne", "-b", host, "-p", str(port), "cluster_health.asgi:application"]


def celery_args() -> list[str]:
    """The Celery command line for the server's app; the subcommand and its options follow."""
    return [sys.executable, "-m", "celery", "-A", "cluster_health"]


def server_worker_args(node_name: str = "server@%h") -> list[str]:
    # Prefork, not threads: with the thread pool, acks racing the consumer's close after a
    # broker restart crashed the worker (kombu's channel lost its connection mid-close).
    return [
        *celery_args(),
        "worker",
        "-Q",
        "server",
        "-n",
        node_name,
        "-P",
        "prefork",
        "-c",
        "2",
        "--without-gossip",
        "--without-mingle",
        "-l",
        "INFO",
    ]


def beat_args(schedule_dir: Path) -> list[str]:
    return [*celery_args(), "beat", "-l", "INFO", "--pidfile", str(schedule_dir / "beat.pid")]


def agent_args(name: str, address: str, broker: str, key_file: str | os.PathLike[str] | None = None) -> list[str]:
    args = [sys.executable, "-m", "agents", "run", "--name", name, "--address", address, "--broker", broker]
    return args + ["--key-file", os.fspath(key_file)] if key_file else args


class Supervisor:
    """Starts named processes and stops all of them, also on errors and signals.

    Processes started with ``restart=True`` are started again by ``revive()`` when they
    exit on their own, as a deployment's process manager would (compose's
    ``restart: unless-stopped``, systemd's ``Restart=always``). The Celery worker needs
    it: kombu can crash the worker while it closes a connection the broker dropped.
    """

    def __init__(self, logdir: Path, env: dict[str, str]) -> None:
        self.logdir = Path(logdir)
        self.env = env
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.specs: dict[str, tuple[list[str], dict[str, str] | None, bool]] = {}
        self.restarts: dict[str, int] = {}
        self.lock = threading.Lock()

    def start(
        self, name: str, args: list[str], env: dict[str, str] | None = None, restart: bool = False
    ) -> subprocess.Popen[bytes]:
        with self.lock:
            old = self.procs.get(name)
            if old is not None and old.poll() is None:
                raise RuntimeError(f"{name} is already running")
            proc = spawn(args, self.logdir / f"{name}.log", env=env or self.env)
            self.procs[name] = proc
            self.specs[name] = (args, env, restart)
            return proc

    def stop(self, name: str, sig: int = signal.SIGTERM, timeout: float = 10.0, group: bool = True) -> None:
        with self.lock:
            proc = self.procs.pop(name, None)
            self.specs.pop(name, None)
        if proc is not None:
            stop_process(proc, timeout=timeout, sig=sig, group=group)

    def revive(self) -> list[str]:
        """Start again every restartable process that exited on its own; return their names."""
        revived = []
        with self.lock:
            for name, proc in list(self.procs.items()):
                args, env, restart = self.specs[name]
                if restart and proc.poll() is not None:
                    stop_process(proc, timeout=1)  # its children, if any, go with it
                    with open(self.logdir / f"{name}.log", "ab") as log:
                        log.write(f"\n--- exited with {proc.returncode}; restarted by the supervisor ---\n".encode())
                    self.procs[name] = spawn(args, self.logdir / f"{name}.log", env=env or self.env)
                    self.restarts[name] = self.restarts.get(name, 0) + 1
                    revived.append(name)
        return revived

    def alive(self, name: str) -> bool:
        proc = self.procs.get(name)
        return proc is not None and proc.poll() is None

    def log(self, name: str) -> str:
        path = self.logdir / f"{name}.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def stop_all(self) -> None:
        # Agents first (they may be mid-probe), then the server side, Redis last.
        order = sorted(self.procs, key=lambda n: 0 if n.startswith("agent") else 2 if n == "redis" else 1)
        for name in order:
            started = time.monotonic()
            self.stop(name, timeout=8.0)
            if time.monotonic() - started > SLOW_STOP_S:
                print(f"{name} took {time.monotonic() - started:.1f}s to stop", flush=True)


# `scripts/run`: the whole system on this one machine.


def _manage(
    env: dict[str, str], *args: str, timeout: float = 120.0, stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    return run_to_end([sys.executable, str(ROOT / "manage.py"), *args], env=env, timeout=timeout, stdin=stdin)


def create_admin_login(env: dict[str, str]) -> tuple[str, subprocess.CompletedProcess[str]]:
    """Create (or reset) the `admin` login, operator and superuser, with a new random password.

    Returns the password and the finished manage.py command. The password goes in on
    standard input: on the command line, `ps` would show it to every user.
    """
    import secrets

    password = secrets.token_urlsafe(12)
    args = ("bootstrap_user", "--username", "admin", "--password-stdin", "--operator", "--superuser")
    return password, _manage(env, *args, stdin=password + "\n")


def _online_nodes(env: dict[str, str]) -> list[str]:
    import json

    out = _manage(env, "nodes", "--json", timeout=60)
    if out.returncode != 0:
        return []
    try:
        nodes = json.loads(out.stdout)
    except ValueError:
        return []
    if isinstance(nodes, dict):
        nodes = nodes.get("nodes", [])
    return [n["name"] for n in nodes if n.get("online")]


def _parse_run_options(argv: list[str] | None) -> argparse.Namespace:
    """The command line of `scripts/run`: agents, web address and port, the first sweep."""
    import argparse

    parser = argparse.ArgumentParser(
        prog="scripts/run",
        description=(
            "Bring up cluster-health on this machine: private Redis, database, web, Celery "
            "server worker, beat and local agents, then start a first sweep."
        ),
    )
    parser.add_argument("--agents", type=int, default=4, help="local agents to start (default 4)")
    parser.add_argument("--host", default="127.0.0.1", help="address the web server binds (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=8000, help="web port (default 8000)")
    parser.add_argument("--kind", default="full", help="kind of the first sweep (default full)")
    parser.add_argument("--no-sweep", action="store_true", help="do not start a first sweep")
    opts = parser.parse_args(argv)
    if not 1 <= opts.agents <= 32:
        parser.error("--agents: between 1 and 32 local agents")
    return opts


def _check_manage(out: subprocess.CompletedProcess[str], failure: str) -> None:
    """Show a failed manage.py command's output and end the start with `failure`."""
    if out.returncode != 0:
        print(out.stdout + out.stderr, file=sys.stderr)
        raise RuntimeError(failure)


def _start_stack(
    sup: Supervisor,
    env: dict[str, str],
    opts: argparse.Namespace,
    rundir: Path,
    redis_port: int,
    redis_url: str,
    say: Callable[[str], None],
) -> tuple[str, str, list[str]]:
    """Start Redis, the database, web, worker, beat and the enrolled agents; return URL, password, agents."""
    proc = sup.start("redis", redis_args(redis_port, rundir))
    wait_for_port("127.0.0.1", redis_port, 10, proc)
    say(f"redis-server on {redis_url}")
    _check_manage(_manage(env, "migrate", "--noinput", timeout=300), "migrate failed")
    say("database migrated")
    password, out = create_admin_login(env)
    _check_manage(out, "could not create the login")
    proc = sup.start("web", web_args(opts.host, opts.port), restart=True)
    sup.start("worker", server_worker_args("server@local"), restart=True)
    sup.start("beat", beat_args(rundir), restart=True)
    names = [f"node{i + 1:02d}" for i in range(opts.agents)]
    keys = rundir / "keys"
    # Fresh keys every start (the old ones are revoked): the agents are signed as in a deployment.
    _check_manage(_manage(env, "enroll", *names, "--rotate", "--out", str(keys)), "could not enrol the agents")
    for name in names:
        sup.start(f"agent-{name}", agent_args(name, "127.0.0.1", redis_url, keys / f"{name}.key"))
    wait_for_port(opts.host, opts.port, 60, proc)
    url = f"http://{'127.0.0.1' if opts.host in ('0.0.0.0', '::') else opts.host}:{opts.port}/"
    say(f"web server on {url}")
    return url, password, names


def _wait_for_agents(sup: Supervisor, env: dict[str, str], names: list[str], say: Callable[[str], None]) -> None:
    """Wait up to 90 s for every local agent to be online, failing if a process exits meanwhile."""
    deadline = time.monotonic() + 90
    online: list[str] = []
    while time.monotonic() < deadline and len(online) < len(names):
        for name in list(sup.procs):
            if not sup.alive(name):
                raise RuntimeError(f"{name} exited:\n{sup.log(name)[-3000:]}")
        online = _online_nodes(env)
        if len(online) < len(names):
            time.sleep(1)
    say(f"agents online: {', '.join(online) or 'none'}")


def _first_sweep(env: dict[str, str], kind: str, say: Callable[[str], None]) -> None:
    """Request the first sweep of `kind` and report what manage.py said."""
    out = _manage(env, "sweep", "--kind", kind)
    if out.returncode != 0:
        print(out.stdout + out.stderr, file=sys.stderr)
    else:
        say(out.stdout.strip().splitlines()[-1] if out.stdout.strip() else "sweep requested")


def _supervise(sup: Supervisor, rundir: Path, say: Callable[[str], None]) -> NoReturn:
    """Restart what exits on its own, every second, until a process dies for good or a signal ends it."""
    while True:
        time.sleep(1)
        for name in sup.revive():
            say(f"{name} exited and was restarted (log: {rundir / 'logs' / (name + '.log')})")
        for name in list(sup.procs):
            if not sup.alive(name):
                say(f"{name} exited unexpectedly; last lines of its log:\n{sup.log(name)[-2000:]}")
                raise RuntimeError(f"{name} exited")


def main(argv: list[str] | None = None) -> int:
    opts = _parse_run_options(argv)
    var = Path(os.environ.get("CLUSTER_HEALTH_VAR_DIR", ROOT / "var"))
    rundir = var / "run"
    rundir.mkdir(parents=True, exist_ok=True)
    redis_port = free_port()
    redis_url = f"redis://127.0.0.1:{redis_port}/0"
    env = stack_env(redis_url, var, CLUSTER_HEALTH_HEARTBEAT_S=os.environ.get("CLUSTER_HEALTH_HEARTBEAT_S", "2"))
    sup = Supervisor(rundir / "logs", env)
    stopping = False

    def _stop(signum: int, frame: FrameType | None) -> NoReturn:
        nonlocal stopping
        stopping = True
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, _stop)
    # Also when started in the background by a shell, which leaves SIGINT ignored: Ctrl-C or kill -INT stops it.
    signal.signal(signal.SIGINT, _stop)
    started = time.monotonic()

    def say(msg: str) -> None:
        print(f"[{time.monotonic() - started:5.1f}s] {msg}", flush=True)

    try:
        url, password, names = _start_stack(sup, env, opts, rundir, redis_port, redis_url, say)
        _wait_for_agents(sup, env, names, say)
        if not opts.no_sweep:
            _first_sweep(env, opts.kind, say)
        print(
            "\n  cluster-health is running\n"
            f"  open     {url}\n"
            f"  login    admin / {password}\n"
            f"  logs     {rundir / 'logs'}\n"
            "  Ctrl-C stops every process started here.\n",
            flush=True,
        )
        _supervise(sup, rundir, say)
    except KeyboardInterrupt:
        say("stopping")
        return 0
    except STARTUP_ERRORS as exc:
        return refused("scripts/run", exc)
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        sup.stop_all()
        say("all processes stopped")


if __name__ == "__main__":
    sys.exit(main())
