"""Real processes for the tests: a private redis-server, Celery workers, agents, the ASGI server.

The command lines and the process handling come from devtools.devstack, so
the tests start exactly what `scripts/run` and a deployment start.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar
from urllib.parse import quote

from devtools.devstack import (
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

# Its own helpers, and those of devtools.devstack the test modules and benchmarks import from here.
__all__ = [
    "TlsFiles",
    "make_tls_files",
    "RedisServer",
    "wait_until",
    "resident_kib",
    "ROOT",
    "Supervisor",
    "agent_args",
    "beat_args",
    "free_port",
    "python_env",
    "redis_args",
    "server_worker_args",
    "spawn",
    "stop_process",
    "wait_for_port",
    "web_args",
]

T = TypeVar("T")


@dataclass(frozen=True)
class TlsFiles:
    """A test CA and a server certificate for 127.0.0.1 signed by it (PEM files)."""

    ca: Path
    cert: Path
    key: Path


def make_tls_files(directory: Path) -> TlsFiles:
    """A fresh CA and a certificate for IP 127.0.0.1, made with the openssl command line."""
    directory.mkdir(parents=True, exist_ok=True)
    files = TlsFiles(directory / "ca.crt", directory / "server.crt", directory / "server.key")
    ca_key, csr, ext = directory / "ca.key", directory / "server.csr", directory / "server.ext"
    ext.write_text("subjectAltName=IP:127.0.0.1\n")
    for args in (
        ["req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", ca_key, "-out", files.ca, "-days", "2"]
        + ["-subj", "/CN=cluster-health test CA"],
        ["req", "-newkey", "rsa:2048", "-nodes", "-keyout", files.key, "-out", csr, "-subj", "/CN=127.0.0.1"],
        ["x509", "-req", "-in", csr, "-CA", files.ca, "-CAkey", ca_key, "-CAcreateserial", "-out", files.cert]
        + ["-days", "2", "-extfile", ext],
    ):
        subprocess.run(["openssl", *map(str, args)], check=True, capture_output=True, timeout=60)
    return files


class RedisServer:
    """A private redis-server on a free loopback port, keeping nothing on disk.

    ``password``: the default user's password (``requirepass``); ``users``: ACL rules, one
    ``--user`` each (``"agent on >secret ~* +@all"``); ``tls``: serve TLS only, on ``port``.
    """

    def __init__(
        self,
        workdir: Path,
        port: int | None = None,
        *,
        password: str | None = None,
        users: tuple[str, ...] = (),
        tls: TlsFiles | None = None,
    ) -> None:
        self.workdir = Path(workdir)
        self.port = port or free_port()
        self.password, self.users, self.tls = password, users, tls
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return self.url_for(None, self.password)

    def url_for(self, user: str | None, password: str | None) -> str:
        """The URL as ``user`` (None: the default user) with ``password``."""
        auth = f"{quote(user or '', safe='')}:{quote(password, safe='')}@" if password else ""
        return f"{'rediss' if self.tls else 'redis'}://{auth}127.0.0.1:{self.port}/0"

    def options(self) -> list[str]:
        args = ["--requirepass", self.password] if self.password else []
        for rule in self.users:
            args += ["--user", *rule.split()]
        if self.tls:
            args += ["--port", "0", "--tls-port", str(self.port), "--tls-auth-clients", "no"]
            args += ["--tls-cert-file", str(self.tls.cert), "--tls-key-file", str(self.tls.key)]
            args += ["--tls-ca-cert-file", str(self.tls.ca)]
        return args

    @property
    def socket_url(self) -> str:
        """The same server through its unix socket (for agents inside network namespaces)."""
        return f"redis+socket://{self.workdir / 'redis.sock'}"

    def start(self) -> None:
        args = redis_args(self.port, self.workdir, self.workdir / "redis.sock", extra=self.options())
        self.proc = spawn(args, self.workdir / "redis.log")
        wait_for_port("127.0.0.1", self.port, 10, self.proc)

    def stop(self) -> None:
        if self.proc is not None:
            stop_process(self.proc)
            self.proc = None

    def restart(self, down_for: float = 0.0) -> None:
        self.stop()
        time.sleep(down_for)
        self.start()


def wait_until(predicate: Callable[..., T], timeout: float, interval: float = 0.1, message: str = "condition") -> T:
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
