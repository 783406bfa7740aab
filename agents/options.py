"""Command-line helpers shared by `python -m agents` (agents/cli.py) and its `check` action (agents/check.py)."""

from __future__ import annotations

import argparse
import os
import re
import socket


def local_node_name() -> str:
    name = re.sub(r"[^A-Za-z0-9._-]", "-", socket.gethostname())[:63].lstrip("._-")
    return name or "node"


def add_env_options(parser: argparse.ArgumentParser, *options: tuple[str, str, str | None, str]) -> None:
    """Options that default to an environment variable (how a service unit or a job prolog sets them).

    options: (flag, variable, fallback when the variable is unset or empty, help) rows.
    """
    for flag, variable, fallback, text in options:
        parser.add_argument(flag, default=os.environ.get(variable) or fallback, help=text)
