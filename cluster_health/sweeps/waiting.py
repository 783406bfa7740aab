"""Requesting a sweep and waiting for it to end, for the command-line tools that gate on its verdict."""

from __future__ import annotations

import time
from collections.abc import Callable

from django.core.management.base import CommandError

from cluster_health.models import Sweep

POLL_S = 0.5  # how often the row is re-read while waiting: a person watching, not a tight loop


def progress_line(sweep: Sweep) -> str:
    """One line of progress: status, round, pairs done, failures so far."""
    p = sweep.progress()
    return (
        f"sweep {sweep.pk}: {sweep.status}, round {p['round']} of {p['rounds']}, "
        f"pairs {p['pairs_done']}/{p['pairs_total']} done, {p['failures']} failures so far"
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
