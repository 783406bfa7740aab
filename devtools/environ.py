"""Setting an environment variable for a while and putting it back."""

from __future__ import annotations

import os


def restore_env(name: str, previous: str | None) -> None:
    """Put ``name`` back as it was: ``previous``, or unset when it was not set (None)."""
    if previous is None:
        os.environ.pop(name, None)
    else:
        os.environ[name] = previous
