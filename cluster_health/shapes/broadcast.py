"""Persist, then broadcast: after the transaction commits, tell browsers what changed.

Messages go to the sweep's group ``sweep.<id>`` and to ``overview``. A browser
that misses one re-reads the rows, so a failed send is logged, never raised.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from contextlib import contextmanager

from asgiref.sync import async_to_sync
from django.db import transaction

log = logging.getLogger(__name__)
OVERVIEW_GROUP = "overview"
# A whole-sweep count reads every pair row (523,776 at 1,024 nodes, ~70 ms): at round changes it is
# sent at most this often per sweep, and the rounds in between count their own round only.
SWEEP_COUNT_EVERY_S = 2.0
_last_sweep_count: dict[int, float] = {}


def sweep_group(sweep_id: int) -> str:
    return f"sweep.{sweep_id}"


def message(sweep, pairs: list[dict] | None = None, progress: dict | None = None) -> dict:
    return {
        "type": "sweep.update",
        "sweep": sweep.pk,
        "pairs": pairs or [],
        "progress": progress if progress is not None else sweep.progress(),
        "status": sweep.status,
        "verdict": sweep.verdict,
    }


async def _to_both_groups(layer, msg: dict) -> None:
    """The sweep's page and the overview, in one trip into the event loop (each trip costs a loop)."""
    await layer.group_send(sweep_group(msg["sweep"]), msg)
    await layer.group_send(OVERVIEW_GROUP, msg)


def _send(msg: dict) -> None:
    from channels.layers import get_channel_layer

    try:
        layer = get_channel_layer()
        if layer is None:
            return
        async_to_sync(_to_both_groups)(layer, msg)
    except Exception:  # browsers re-read state on reconnect; ingest must not fail for them
        log.warning("broadcast of sweep %s failed", msg.get("sweep"), exc_info=True)


def sweep_update(sweep, pairs: list[dict] | None = None, *, round_only: bool = False, throttle: bool = False) -> None:
    """Queue a sweep.update for after the current transaction commits (now, outside one).

    Pair updates pass ``round_only`` so their progress counts one round, not the sweep;
    round changes pass ``throttle`` so the whole sweep is counted at most every
    SWEEP_COUNT_EVERY_S. Starts, ends and cancels count the whole sweep.
    """
    sweep_id = sweep.pk
    if throttle and not round_only:
        now = time.monotonic()
        if now - _last_sweep_count.get(sweep_id, float("-inf")) < SWEEP_COUNT_EVERY_S:
            round_only = True
        else:
            if len(_last_sweep_count) > 1000:
                _last_sweep_count.clear()
            _last_sweep_count[sweep_id] = now

    if _held is not None:
        transaction.on_commit(lambda: _held.append((time.monotonic(), sweep_id, pairs, round_only)))
        return
    transaction.on_commit(lambda: _send_fresh(sweep_id, pairs, round_only))


# Fields a message reads of the sweep's row when its progress counts one round (not the nodes, not params).
_ROUND_FIELDS = ("id", "status", "verdict", "current_round", "total_rounds")


def _send_fresh(sweep_id: int, pairs: list[dict] | None, round_only: bool) -> None:
    from cluster_health.models import Sweep

    rows = Sweep.objects.filter(pk=sweep_id)
    fresh = (rows.only(*_ROUND_FIELDS) if round_only else rows).first()
    if fresh is not None:
        _send(message(fresh, pairs, fresh.progress(round_only=round_only)))


# While the ingest consumer holds its updates back (``holding``): (queued at, sweep, pairs, round only).
_held: list[tuple[float, int, list[dict] | None, bool]] | None = None


@contextmanager
def holding() -> Iterator[None]:
    """Hold this process's updates back until ``flush``, which sends one per sweep.

    For the ingest consumer: a round's batches each closed some pairs and sent an update,
    and the round's last one sent the next round's as well, before the consumer could take
    the next batch. It sends them when it finds no message waiting (at the latest HOLD_S
    after the first), merged per sweep: one read of the sweep and its counts, one message.
    """
    global _held
    _held = []
    try:
        yield
    finally:
        try:
            flush()
        finally:
            _held = None


HOLD_S = 0.25  # the longest an update waits while messages keep coming


def held_since() -> float | None:
    """When the oldest held update was queued (time.monotonic()), or None."""
    return _held[0][0] if _held else None


def flush() -> None:
    """Send the held updates: one message per sweep, its pairs in the order they closed, counted now."""
    if not _held:
        return
    merged: dict[int, tuple[list[dict], bool]] = {}
    for _, sweep_id, pairs, round_only in _held:
        before, only = merged.get(sweep_id, ([], True))
        merged[sweep_id] = (before + (pairs or []), only and round_only)
    _held.clear()
    for sweep_id, (pairs, round_only) in merged.items():
        try:
            _send_fresh(sweep_id, pairs, round_only)
        except Exception:  # browsers re-read state on reconnect; ingest must not fail for them
            log.warning("update of sweep %s not sent", sweep_id, exc_info=True)
