"""Real processes for the tests: a private redis-server, Celery workers, agents, the ASGI server.

The command lines and the process handling come from devtools.devstack, so
the tests start exactly what `scripts/run` and a deployment start.
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

from devtools.devstack import (  # noqa: F401  (re-exported for test modules)
    ROOT,
    Supervisor,
    agent_args,
    beat_args,
    free_port,
    python_env,
    redis_args,
    server_worker_args,
    spawn,
    stop_process,
    wait_for_port,
    web_args,
)


class RedisServer:
    """A private redis-server on a free loopback port, keeping nothing on disk."""

    def __init__(self, workdir: Path, port: int | None = None):
        self.workdir = Path(workdir)
        self.port = port or free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    @property
    def socket_url(self) -> str:
        """The same server through its unix socket (for agents inside network namespaces)."""
        return f"redis+socket://{self.workdir / 'redis.sock'}"

    def start(self) -> None:
        self.proc = spawn(redis_args(self.port, self.workdir, self.workdir / "redis.sock"), self.workdir / "redis.log")
        wait_for_port("127.0.0.1", self.port, 10, self.proc)

    def stop(self) -> None:
        if self.proc is not None:
            stop_process(self.proc)
            self.proc = None

    def restart(self, down_for: float = 0.0) -> None:
        self.stop()
        time.sleep(down_for)
        self.start()


def wait_until(predicate, timeout: float, interval: float = 0.1, message: str = "condition"):
    """Poll `predicate` until it returns a truthy value; raise after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"{message} not reached within {timeout}s")
        time.sleep(interval)


def resident_kib(pid: int) -> int:
    """A process's resident memory in KiB, from /proc."""
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))
