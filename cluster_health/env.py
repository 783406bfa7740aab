"""Typed readers for settings from environment variables.

A bad value raises ImproperlyConfigured naming the variable, so a typo stops the
process at start instead of running with a silent default. Secrets may also come
from a file named by ``NAME_FILE`` (Docker and Kubernetes secrets).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import TypeVar, overload

from django.core.exceptions import ImproperlyConfigured

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


@overload
def envstr(name: str, default: str) -> str: ...
@overload
def envstr(name: str, default: None = None) -> str | None: ...


def envstr(name: str, default: str | None = None) -> str | None:
    file_var = os.environ.get(name + "_FILE")
    if file_var:
        try:
            with open(file_var, encoding="utf-8") as f:
                return f.read().strip()
        except OSError as exc:
            raise ImproperlyConfigured(f"{name}_FILE: cannot read {file_var}: {exc}") from exc
    return os.environ.get(name, default)


def envbool(name: str, default: bool) -> bool:
    raw = os.environ.get(name)
    if raw is None:
        return default
    val = raw.strip().lower()
    if val in _TRUE:
        return True
    if val in _FALSE:
        return False
    raise ImproperlyConfigured(f"{name}: expected a boolean (1/0, true/false, yes/no), got {raw!r}")


Number = TypeVar("Number", int, float)


def envint(name: str, default: int, lo: int | None = None, hi: int | None = None) -> int:
    return _envnumber(name, default, lo, hi, int, "an integer")


def envfloat(name: str, default: float, lo: float | None = None, hi: float | None = None) -> float:
    return _envnumber(name, default, lo, hi, float, "a number")


def _envnumber(
    name: str, default: Number, lo: Number | None, hi: Number | None, parse: Callable[[str], Number], expected: str
) -> Number:
    """The variable parsed as a number within lo..hi (either may be None: no bound); unset or blank: default."""
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    val = _parsed(name, raw, parse, expected)
    if (lo is not None and val < lo) or (hi is not None and val > hi):
        raise ImproperlyConfigured(f"{name}: {val} is outside {lo}..{hi}")
    return val


def _parsed(name: str, raw: str, parse: Callable[[str], Number], expected: str) -> Number:
    try:
        return parse(raw)
    except ValueError:
        raise ImproperlyConfigured(f"{name}: expected {expected}, got {raw!r}") from None


def envlist(name: str, default: list[str] | None = None) -> list[str]:
    raw = os.environ.get(name)
    if raw is None:
        return list(default or [])
    return [item.strip() for item in raw.split(",") if item.strip()]


def envpins(name: str, keys: tuple[str, ...]) -> dict[str, list[str]]:
    """``key=value[|value...],...`` as {key: [values]}, keys among ``keys``; unset or blank: {}."""
    raw = (envstr(name) or "").strip()
    out: dict[str, list[str]] = {}
    for item in filter(None, (part.strip() for part in raw.split(","))):
        key, sep, values = item.partition("=")
        accepted = [v.strip() for v in values.split("|") if v.strip()]
        if not sep or key.strip() not in keys or not accepted or len(accepted) != len(values.split("|")):
            raise ImproperlyConfigured(f"{name}: expected {'|'.join(keys)}=VALUE[|VALUE...],..., got {item!r}")
        out[key.strip()] = accepted
    return out
