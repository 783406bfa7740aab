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
from django.utils import timezone

from cluster_health import coverage
from cluster_health.actions import slurm
from cluster_health.core import planner
from cluster_health.models import IN_SERVICE, Node, Sweep
from cluster_health.queues import dispatch
from cluster_health.sweeps.request import MAX_NODES, MAX_PAIRS, request_sweep

log = logging.getLogger(__name__)
__all__ = ["MAX_NODES", "IdleSweepError", "release_hold", "schedule_max_nodes", "start"]
DEFAULT_MAX_NODES = 256  # idle nodes held at most; their stalest pairs in at most IDLE_MAX_ROUNDS rounds
HOLD_MARGIN_S = 300.0  # on top of the estimate: planning, queueing, the confirmation pass's rounds
CATCH_WAIT_MIN = 30  # a catch lasts the sweep's length and this long


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
    candidates: list[str],
    max_nodes: int,
    measured: dict | None = None,
    now=None,
    power: float = 2.0,
    max_rounds: int | None = None,
) -> tuple[list[str], list[tuple[str, str]]]:
    """At most ``max_nodes`` of ``candidates`` whose pairs among them are the stalest, and their pairs, stalest
    first: as many as ``max_rounds`` rounds hold (``planner.fit_rounds``), every pair among them when None (at
    most MAX_PAIRS either way); the nodes returned are those of the pairs kept. ``measured``: each pair's last
    measured time, read from the database when not given (benchmarks/coverage.py gives its simulated fleet's);
    ``now``: the time ages count to.

    Bounded by rounds, a sweep takes the stalest pairs among many idle nodes for a short hold: each round
    pairs up most of them, and once most of the fleet is covered every probe goes to a stale pair, where every
    pair among a few nodes (N-1 rounds for N nodes) measures mostly fresh ones.

    The nodes are picked greedily by staleness (``coverage.staleness``: age squared, never measured heaviest):
    first the candidate whose pairs with the other candidates weigh most, then each time the one whose pairs
    with the nodes picked so far weigh most. So the sweep holds nodes that share many stale pairs, not just
    the ends of the few stalest: once most of the fleet is covered the stale pairs are scattered, and holding
    two nodes per stale pair would measure a few dozen of them a sweep. Ties go to the candidates' order."""
    names = list(dict.fromkeys(candidates))
    if measured is None:
        measured = coverage.last_measured(names)
    now = now or timezone.now()
    if len(names) <= max_nodes:
        chosen = names
    else:
        w = coverage.staleness(names, measured, now, power)
        sums = [sum(row) for row in w]
        first = max(range(len(names)), key=sums.__getitem__)
        picked, taken, gain = [first], {first}, list(w[first])
        while len(picked) < max_nodes:
            k = max((i for i in range(len(names)) if i not in taken), key=gain.__getitem__)
            picked.append(k)
            taken.add(k)
            gain = [g + x for g, x in zip(gain, w[k], strict=True)]
        chosen = [names[i] for i in sorted(picked)]
    pairs = coverage.stalest_first(chosen, measured)
    if max_rounds is not None:
        pairs = planner.fit_rounds(pairs, max_rounds)
    pairs = pairs[:MAX_PAIRS]
    if max_rounds is not None:
        kept = {n for pair in pairs for n in pair}
        chosen = [n for n in chosen if n in kept]
    return chosen, pairs


def to_catch(busy: list[str], candidates: list[str], measured: dict, now, limit: int, power: float = 2.0) -> list[str]:
    """At most ``limit`` of the ``busy`` nodes (those running a job) to catch: the ones whose pairs with the
    idle ``candidates`` are stalest (``coverage.staleness_to``), so that the next idle sweep can pair them with
    idle nodes as soon as their job ends, rather than wait for both ends of their stale pairs to be idle at
    the same moment by chance. Ties go to ``busy``'s order."""
    if limit <= 0 or not busy or not candidates:
        return []
    weight = coverage.staleness_to(busy, candidates, measured, now, power)
    ranked = sorted(range(len(busy)), key=lambda i: -weight[i])
    return [busy[i] for i in ranked[:limit]]


def hold_minutes(pairs: list[tuple[str, str]], names: list[str]) -> int:
    """How long to hold the nodes: each round's probe deadline, twice (a confirmation pass), the pass's wait
    (CLUSTER_HEALTH_CONFIRM_AFTER_S) and a margin."""
    rounds = len(planner.schedule_pairs(pairs, names))
    deadline = dispatch.probe_settings({}, "bandwidth", kind="pair")["deadline_s"]
    return math.ceil((2 * rounds * deadline + settings.CONFIRM_AFTER_S + HOLD_MARGIN_S) / 60)


def pass_rounds(max_nodes: int, max_rounds: int | None = None) -> int:
    """The rounds of one pass of an idle sweep of ``max_nodes`` nodes bounded to ``max_rounds`` (None: every pair)."""
    return max_nodes - 1 if max_rounds is None else min(max_nodes - 1, max_rounds)


def catch_minutes(max_nodes: int, max_rounds: int | None = None) -> int:
    """How long a catch lasts: one pass of an idle sweep of ``max_nodes`` nodes in at most ``max_rounds`` rounds
    (every round's probe deadline), and CATCH_WAIT_MIN for its job to end and the next idle sweep to come."""
    deadline = dispatch.probe_settings({}, "bandwidth", kind="pair")["deadline_s"]
    return math.ceil(pass_rounds(max_nodes, max_rounds) * deadline / 60) + CATCH_WAIT_MIN


def idle_candidates(states: dict[str, str] | None = None, reserved: dict[str, list[str]] | None = None) -> list[str]:
    """Our nodes Slurm has idle now: running no job and in no reservation but our catches (not in an admin's
    maintenance, nor in another idle sweep's hold); active, in service, online; in Slurm's order."""
    ours = _ours()
    states = slurm.node_states() if states is None else states
    reserved = slurm.reservations() if reserved is None else reserved
    caught = set(slurm.catches(reserved).values())
    elsewhere = {n for r, nodes in reserved.items() for n in nodes} - caught
    return [
        ours[n]
        for n, state in states.items()
        if n in ours and n not in elsewhere and slurm.runs_nothing(state) and (n in caught or state == "IDLE")
    ]


def _ours() -> dict[str, str]:
    return slurm.ours_by_slurm_name(
        Node.objects.filter(Node.online_q(), active=True, state=IN_SERVICE).values_list("name", flat=True)
    )


def start(max_nodes: int | None = None, source: str = "command", user=None, max_rounds: int | None = None) -> Sweep:
    """Hold idle nodes (caught ones among them), request a ``pairs`` sweep of their stalest pairs, in at most
    ``max_rounds`` rounds (default IDLE_MAX_ROUNDS), then catch busy nodes for the next one; IdleSweepError if
    none can run."""
    max_nodes = max_nodes or DEFAULT_MAX_NODES
    max_rounds = max_rounds or settings.IDLE_MAX_ROUNDS
    states, reserved = slurm.node_states(), slurm.reservations()
    catches = slurm.catches(reserved)  # reservation -> Slurm node
    candidates = idle_candidates(states, reserved)
    if len(candidates) < 2:
        raise IdleSweepError(f"{len(candidates)} node(s) idle in Slurm and online here: nothing to sweep")
    measured = coverage.last_measured(candidates)
    names, pairs = choose(candidates, max_nodes, measured, max_rounds=max_rounds)
    minutes = hold_minutes(pairs, names)
    reservation = f"{slurm.HOLD_PREFIX}{secrets.token_hex(6)}"
    to_slurm = {n: slurm.slurm_name(n) for n in names}
    hold_user = settings.SLURM_HOLD_USER or getpass.getuser()
    try:
        slurm.hold(reservation, list(to_slurm.values()), minutes, hold_user)
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
    held = set(to_slurm.values())
    try:
        _catch_more(states, catches, held, candidates, max_nodes, max_rounds, hold_user)
    except slurm.SlurmError as exc:
        log.warning("idle sweep %s: no catches made: %s", sweep.pk, exc)
    return sweep


def _catch_more(states, catches, held, candidates, max_nodes, max_rounds, hold_user) -> list[str]:
    """End the catches of the nodes this sweep holds now, then catch busy nodes with stale pairs, up to
    IDLE_CATCH_SHARE of the fleet under a catch at once. Returns the reservations made."""
    for reservation, node in catches.items():
        if node in held:
            slurm.release(reservation)
    left = {r: n for r, n in catches.items() if n not in held}
    ours = _ours()
    limit = math.floor(settings.IDLE_CATCH_SHARE * len(ours)) - len(left)
    caught = set(left.values())
    busy = [ours[n] for n, state in states.items() if n in ours and n not in caught and slurm.running_job(state)]
    if limit <= 0 or not busy:
        return []
    measured = coverage.last_measured(busy + candidates)
    made = []
    for name in to_catch(busy, candidates, measured, timezone.now(), limit):
        reservation = f"{slurm.CATCH_PREFIX}{secrets.token_hex(6)}"
        slurm.hold(reservation, [slurm.slurm_name(name)], catch_minutes(max_nodes, max_rounds), hold_user, catch=True)
        made.append(reservation)
    if made:
        log.info("idle sweeps: %d busy node(s) caught for the next one", len(made))
    return made


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
