"""How every process reaches Redis: the broker URL, its password kept out of argv and logs, and TLS.

Plain Python, no Django: the agent, its probe subprocesses and the server all build
their Redis connections from here, so a password (``redis://user:PASS@host/0``) or
TLS (``rediss://``) set once works for the Celery broker, the channel layer, the
ingest buffer and the rendezvous alike.

TLS files come from the environment, the same names on every role:

- ``CLUSTER_HEALTH_REDIS_CA_FILE``: the CA that signed the broker's certificate
  (unset: the system's trust store); the certificate is always verified.
- ``CLUSTER_HEALTH_REDIS_CERT_FILE`` / ``CLUSTER_HEALTH_REDIS_KEY_FILE``: a client
  certificate, for a broker started with ``--tls-auth-clients yes``.
"""

from __future__ import annotations

import logging
import os
import re
import ssl
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

CA_FILE_ENV = "CLUSTER_HEALTH_REDIS_CA_FILE"
CERT_FILE_ENV = "CLUSTER_HEALTH_REDIS_CERT_FILE"
KEY_FILE_ENV = "CLUSTER_HEALTH_REDIS_KEY_FILE"
TLS_SCHEMES = ("rediss",)
_USERINFO_RE = re.compile(r"(\b[a-z][a-z0-9+.-]*://)([^/@\s]*)@", re.I)


class BrokerConfigError(ValueError):
    """A broker setting that cannot work (an unreadable file, a password in argv); the text says which."""


def redact(text: str) -> str:
    """``text`` with the password of every URL in it replaced by ``***`` (the user name is kept)."""

    def hide(m: re.Match[str]) -> str:
        user, sep, _password = m.group(2).partition(":")
        return f"{m.group(1)}{user}{':***' if sep else ''}@"

    return _USERINFO_RE.sub(hide, text)


def has_password(url: str) -> bool:
    try:
        return bool(urlsplit(url).password)
    except ValueError:
        return False


def uses_tls(url: str) -> bool:
    return urlsplit(url).scheme in TLS_SCHEMES


def tls_options(url: str, environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """redis-py's ssl_* keyword arguments for ``url``: empty for plain ``redis://``, never unverified."""
    if not uses_tls(url):
        return {}
    env = os.environ if environ is None else environ
    options: dict[str, Any] = {"ssl_cert_reqs": ssl.CERT_REQUIRED}
    for env_name, option in (
        (CA_FILE_ENV, "ssl_ca_certs"),
        (CERT_FILE_ENV, "ssl_certfile"),
        (KEY_FILE_ENV, "ssl_keyfile"),
    ):
        path = env.get(env_name)
        if path:
            if not os.access(path, os.R_OK):
                raise BrokerConfigError(f"{env_name}: cannot read {path}")
            options[option] = path
    if ("ssl_certfile" in options) != ("ssl_keyfile" in options):
        raise BrokerConfigError(f"{CERT_FILE_ENV} and {KEY_FILE_ENV}: set both or neither")
    return options


def celery_ssl(url: str, environ: Mapping[str, str] | None = None) -> dict[str, Any] | None:
    """Celery's ``broker_use_ssl`` for ``url``: None for plain Redis.

    kombu alone would accept ``rediss://`` without any certificate check (CERT_NONE).
    """
    return tls_options(url, environ) or None


def redis_client_url(broker_url: str) -> str:
    """The redis-py form of a Celery broker URL (Celery says redis+socket://, redis-py unix://)."""
    if broker_url.startswith("redis+socket://"):
        return "unix://" + broker_url[len("redis+socket://") :]
    return broker_url


def redis_client(url: str, **kwargs: Any) -> Any:
    """A redis-py client for a broker URL, with its password and the TLS files from the environment."""
    import redis  # agents import it only where they talk to Redis themselves

    return redis.Redis.from_url(redis_client_url(url), **tls_options(url), **kwargs)


def read_broker_url(
    argv_url: str | None, file_path: str | None, environ: Mapping[str, str] | None = None
) -> str | None:
    """The agent's broker URL: ``--broker-file`` (``CLUSTER_HEALTH_BROKER_URL_FILE``), else ``--broker``,
    else ``CLUSTER_HEALTH_BROKER_URL``.

    A URL with a password is refused on the command line, where every user of the node can
    read it (``ps``), and in a file that others may read (as the node's key file is).
    """
    env = os.environ if environ is None else environ
    if argv_url and has_password(argv_url):
        raise BrokerConfigError(
            "--broker: the URL holds a password, which every user of this node can read in `ps`; "
            "put it in CLUSTER_HEALTH_BROKER_URL or a file named by --broker-file instead"
        )
    if file_path:
        try:
            with open(file_path, encoding="utf-8") as f:
                url, mode = f.read().strip(), os.fstat(f.fileno()).st_mode
        except OSError as exc:
            raise BrokerConfigError(f"--broker-file: cannot read {file_path}: {exc.strerror}") from None
        if not url:
            raise BrokerConfigError(f"--broker-file: {file_path} is empty")
        if has_password(url) and mode & 0o077:
            raise BrokerConfigError(
                f"--broker-file: {file_path} holds a password and is readable by others "
                f"(mode {oct(mode & 0o777)}); chmod 600 it"
            )
        return url
    return argv_url or env.get("CLUSTER_HEALTH_BROKER_URL") or None


def check_credentials(url: str, timeout_s: float = 5.0) -> None:
    """Raise BrokerConfigError if the broker refuses this URL's credentials or its TLS certificate.

    A broker that cannot be reached at all passes: agents may start before Redis does,
    and the worker keeps trying. Refused credentials never start working by retrying.
    """
    import redis

    client = redis_client(url, socket_connect_timeout=timeout_s, socket_timeout=timeout_s)
    try:
        client.ping()
    except (redis.AuthenticationError, redis.exceptions.NoPermissionError) as exc:
        user = urlsplit(url).username or "default"
        raise BrokerConfigError(f"the broker {redact(url)} refused the credentials of user {user!r}: {exc}") from None
    except redis.ConnectionError as exc:
        if isinstance(exc.__cause__ or exc.__context__, ssl.SSLError):
            raise BrokerConfigError(f"TLS to the broker {redact(url)} failed: {exc}") from None
    except redis.ResponseError as exc:  # NOAUTH from a server that wants a password the URL lacks
        if "NOAUTH" in str(exc) or "WRONGPASS" in str(exc):
            raise BrokerConfigError(f"the broker {redact(url)} wants a password: {exc}") from None
        raise
    finally:
        client.close()


class RedactingFilter(logging.Filter):
    """Masks URL passwords in every record a handler writes (Celery's and kombu's messages included)."""

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # a malformed record: the handler reports it, the filter must not raise
            return True
        if "@" in message:
            record.msg, record.args = redact(message), None
        if record.exc_info and not record.exc_text:
            record.exc_text = redact(logging.Formatter().formatException(record.exc_info))
        return True


def redact_logs(logger: logging.Logger | None = None) -> None:
    """Put a RedactingFilter on every handler of ``logger`` (the root logger by default)."""
    for handler in (logger or logging.getLogger()).handlers:
        if not any(isinstance(f, RedactingFilter) for f in handler.filters):
            handler.addFilter(RedactingFilter())
