"""Requesting a sweep and waiting for it to end, for the command-line tools that gate on its verdict."""

from __future__ import annotations

import time
from collections.abc import Callable

from django.core.management.base import CommandError

from cluster_health import vocabulary
from cluster_health.models import Sweep

POLL_S = 0.5  # how often the row is re-read while waiting: a person watching, not a tight loop


def progress_line(sweep: Sweep) -> str:
    """One line of progress: status, round, pairs done, failures so far."""
    p = sweep.progress()
    return (
        f"sweep {sweep.pk}: {sweep.status}, round {p['round']} of {p['rounds']}, "
        f"{p['unit']} {p['pairs_done']}/{p['pairs_total']} done, {p['failures']} failures so far"
    )


def wait_for(
    sweep: Sweep, timeout: float, on_progress: Callable[[str], None] | None = None, poll_s: float = POLL_S
) -> bool:
    """Poll the sweep row until it is closed; True if it closed within ``timeout`` seconds.

    Only reads rows: the reaper task on the server worker alone judges silence and
    deadlines, because only it can tell what still waits in the server's queue (a
    judgement made here, while that worker is down, closed pairs whose results were queued).
    """
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        sweep.refresh_from_db()
        if not sweep.is_open:
            return True
        if on_progress:
            line = progress_line(sweep)
            if line != last:
                on_progress(line)
                last = line
        time.sleep(poll_s)
    sweep.refresh_from_db()
    return not sweep.is_open


def request_or_error(**request) -> Sweep:
    """Request a sweep from the command line: a refused request is a CommandError saying why."""
    from cluster_health import sweeps  # the package imports this module's siblings; import it when used

    try:
        return sweeps.request_sweep(source="command", **request)
    except sweeps.SweepRequestError as exc:
        raise CommandError(str(exc)) from None


def wait_or_cancel(sweep: Sweep, timeout: float, on_progress: Callable[[str], None] | None = None) -> bool:
    """wait_for, then cancel a sweep still open at the timeout (the row re-read); True if it closed in time."""
    from cluster_health import sweeps

    ended = wait_for(sweep, timeout, on_progress)
    if not ended:
        sweeps.cancel(sweep.pk)
        sweep.refresh_from_db()
    return ended


# -- what the sweep commands share: their options, and the exit code of a sweep they waited for


def add_assignments_option(parser, flag: str, metavar: str, help: str) -> None:
    """A repeatable NAME=VALUE option, gathered in a list (assignments() reads it)."""
    parser.add_argument(flag, action="append", default=[], metavar=metavar, help=help)


def assignments(items: list[str], flag: str, form: str) -> dict[str, str]:
    """The NAME=VALUE items of a repeatable option as a dict (a later name wins); one without "=" is a CommandError."""
    out = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep:
            raise CommandError(f"{flag}: {item!r} is not {form}")
        out[name] = value
    return out


def node_names(text: str | None) -> list[str] | None:
    """A --nodes option's comma-separated names (None when it was not given)."""
    return [n.strip() for n in text.split(",") if n.strip()] if text else None


def exit_code(sweep: Sweep) -> int:
    """The verdict's exit code (vocabulary.VERDICT_EXIT_CODES) of a finished sweep; 3 for any other end."""
    return vocabulary.VERDICT_EXIT_CODES[sweep.verdict] if sweep.status == "finished" else 3
