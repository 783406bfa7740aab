"""Idle-gap sweeps: measure the pairs measured longest ago, on nodes Slurm says are idle, held from new jobs meanwhile.

The hold is a Slurm reservation with the MAINT flag, not an exclusive job that runs nothing:
slurmctld refuses to create it over a node that runs a job (so a job that started since the
nodes were listed is never probed), it needs no slurmd, partition or account to run in, it
shows as ``maint`` in sinfo, and it ends by itself at its Duration, so a server worker killed
mid-sweep leaves no node held for longer than the sweep was estimated to take. It is released
as soon as the sweep ends (``release_hold``, after every finished sweep; ``manage.py sweep
--idle --wait`` also releases it on any other end).
"""

from __future__ import annotations

import getpass
import logging
import math
import secrets

from django.conf import settings

from cluster_health import coverage
from cluster_health.actions import slurm
from cluster_health.core import planner
from cluster_health.models import IN_SERVICE, Node, Sweep
from cluster_health.queues import dispatch
from cluster_health.sweeps.request import MAX_NODES, MAX_PAIRS, request_sweep

log = logging.getLogger(__name__)
__all__ = ["MAX_NODES", "IdleSweepError", "release_hold", "schedule_max_nodes", "start"]
DEFAULT_MAX_NODES = 32  # 496 pairs in about 32 rounds: a gap of an hour or so
HOLD_MARGIN_S = 300.0  # on top of the estimate: planning, queueing, the confirmation pass's rounds


class IdleSweepError(RuntimeError):
    """No idle-gap sweep can run now; the text says why (nothing was held)."""


def schedule_max_nodes(params: dict) -> int | None:
    """An ``idle`` schedule's keyword arguments beside its kind: only ``max_nodes``, 2..MAX_NODES (the command's
    ``--max-nodes``), or none for DEFAULT_MAX_NODES; IdleSweepError saying why otherwise. The Schedules page
    checks a schedule with it before saving it, the scheduled task again when it fires."""
    unknown = sorted(set(params) - {"max_nodes"})
    if unknown:
        raise IdleSweepError(
            f"{unknown[0]}: an idle sweep takes only max_nodes (its nodes are the ones Slurm has idle)"
        )
    max_nodes = params.get("max_nodes")
    if max_nodes is None:
        return None
    if isinstance(max_nodes, bool) or not isinstance(max_nodes, int) or not 2 <= max_nodes <= MAX_NODES:
        raise IdleSweepError(f"max_nodes: expected a whole number 2..{MAX_NODES}, got {max_nodes!r}")
    return max_nodes


def choose(
    candidates: list[str], max_nodes: int, measured: dict | None = None
) -> tuple[list[str], list[tuple[str, str]]]:
    """The nodes of the stalest pairs among ``candidates`` (at most ``max_nodes``), and every pair among them,
    stalest first (at most MAX_PAIRS). ``measured``: each pair's last measured time, read from the database
    when not given (benchmarks/coverage.py gives its simulated fleet's)."""
    if measured is None:
        measured = coverage.last_measured(candidates)
    chosen: dict[str, None] = {}
    for a, b in coverage.stalest_first(candidates, measured):
        wanted = [n for n in (a, b) if n not in chosen]
        if len(chosen) + len(wanted) <= max_nodes:
            chosen.update(dict.fromkeys(wanted))
        if len(chosen) >= max_nodes:
            break
    names = list(chosen)
    return names, coverage.stalest_first(names, measured)[:MAX_PAIRS]


def hold_minutes(pairs: list[tuple[str, str]], names: list[str]) -> int:
    """How long to hold the nodes: each round's probe deadline, twice (a confirmation pass), and a margin."""
    rounds = len(planner.schedule_pairs(pairs, names))
    deadline = dispatch.probe_settings({}, "bandwidth", kind="pair")["deadline_s"]
    return math.ceil((2 * rounds * deadline + HOLD_MARGIN_S) / 60)


def idle_candidates() -> list[str]:
    """Our nodes Slurm reports idle now: active, in service, online; in Slurm's order."""
    ours = slurm.ours_by_slurm_name(
        Node.objects.filter(Node.online_q(), active=True, state=IN_SERVICE).values_list("name", flat=True)
    )
    return [ours[n] for n in slurm.idle_nodes() if n in ours]


def start(max_nodes: int | None = None, source: str = "command", user=None) -> Sweep:
    """Hold idle nodes, then request a ``pairs`` sweep of their stalest pairs; IdleSweepError if none can run."""
    max_nodes = max_nodes or DEFAULT_MAX_NODES
    candidates = idle_candidates()
    if len(candidates) < 2:
        raise IdleSweepError(f"{len(candidates)} node(s) idle in Slurm and online here: nothing to sweep")
    names, pairs = choose(candidates, max_nodes)
    minutes = hold_minutes(pairs, names)
    reservation = f"{slurm.HOLD_PREFIX}{secrets.token_hex(6)}"
    to_slurm = {n: slurm.slurm_name(n) for n in names}
    try:
        slurm.hold(reservation, list(to_slurm.values()), minutes, settings.SLURM_HOLD_USER or getpass.getuser())
    except slurm.SlurmError as exc:
        # A job took one of them since the list was read: slurmctld refused the whole hold. Never probe it.
        raise IdleSweepError(f"could not hold {', '.join(names)}: {exc}") from None
    hold = {"reservation": reservation, "minutes": minutes, "slurm_nodes": list(to_slurm.values())}
    try:
        sweep = request_sweep(
            source=source, user=user, kind="pairs", pairs=[list(p) for p in pairs], marks={"idle_hold": hold}
        )
    except BaseException:
        slurm.release(reservation)
        raise
    log.info(
        "idle sweep %s: %d nodes held by %s for %d min, %d pairs",
        sweep.pk,
        len(names),
        reservation,
        minutes,
        len(pairs),
    )
    return sweep


def release_hold(sweep: Sweep) -> list[str]:
    """Release the Slurm hold an idle sweep ran under (idempotent; nothing for other sweeps)."""
    hold = (sweep.params or {}).get("idle_hold")
    if not hold:
        return []
    try:
        released = slurm.release(hold["reservation"])
    except slurm.SlurmError as exc:
        log.warning(
            "sweep %s: could not release %s (it ends by itself in %s min): %s",
            sweep.pk,
            hold["reservation"],
            hold.get("minutes"),
            exc,
        )
        return [f"hold {hold['reservation']} not released: {exc}"]
    return [f"released {hold['reservation']}"] if released else []
