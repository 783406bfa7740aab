"""A sweep's lifecycle: start (plan), advance round by round, finish with a verdict, cancel.

Every step claims its row with a conditional UPDATE and checks the row count, so
a step delivered twice (a retried task, the reaper racing ingest) runs once.
Sends happen after the commit, through ``dispatch``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime, timedelta

import redis
from django.db import InterfaceError, OperationalError, connection, transaction
from django.db.models import F, Q
from django.utils import timezone

from agents import contract
from cluster_health import coverage, vocabulary
from cluster_health.actions import tasks as actions_tasks
from cluster_health.core import planner, verdicts
from cluster_health.models import IN_SERVICE, OPEN_PAIR_STATUSES, Finding, GpuCheck, GroupProbe, Node, PairProbe, Sweep
from cluster_health.nodes import origin_counts, placed_groups
from cluster_health.queues import dispatch
from cluster_health.shapes import broadcast, matrices
from cluster_health.sweeps import baselines, confirming, findings, gpus, rounds, statistics, turns

log = logging.getLogger(__name__)
MAX_ERROR_TEXT = 4000  # characters of a failed sweep's reason that are kept
INSERT_BATCH = 5000  # probe rows per INSERT when a sweep is planned
FORGOTTEN_PENDING_S = 30.0  # a pending sweep this old was never started: its start task was lost


class PlanningError(ValueError):
    """A sweep cannot be planned; the sweep ends failed with this text."""


def _fail(sweep: Sweep, error: str) -> None:
    Sweep.objects.filter(pk=sweep.pk, status__in=Sweep.OPEN_STATUSES).update(
        status="failed", verdict="unknown", error=error.replace("\x00", "")[:MAX_ERROR_TEXT], finished=timezone.now()
    )
    sweep.refresh_from_db()
    broadcast.sweep_update(sweep)
    actions_tasks.sweep_ended(sweep)  # an idle sweep's hold given back now, not at its Duration
    transaction.on_commit(start_queued)  # its nodes are free for the sweeps queued behind it
    log.warning("sweep %s failed: %s", sweep.pk, error)


def start_sweep(sweep_id: int) -> bool:
    """Plan a pending sweep, create its probe rows and dispatch round 1. False if already started, or
    if it waits its turn behind a running sweep over some of the same nodes."""
    now = timezone.now()
    with transaction.atomic():
        _one_start_at_a_time(sweep_id)
        sweep = Sweep.objects.filter(pk=sweep_id, status="pending").first()
        if sweep is None:
            return False
        params = sweep.params
        try:
            names = _sweep_nodes(sweep, now)
        except (PlanningError, planner.PlanError) as exc:
            _fail(sweep, str(exc))
            return True
        if busy := _running_over(names, sweep_id):
            _wait_for(sweep, busy)
            return False
        if inspecting := turns.inspecting(names):
            _wait_for(sweep, [], inspecting)
            return False
        if not Sweep.objects.filter(pk=sweep_id, status="pending").update(status="running", started=now):
            return False
        sweep.status, sweep.started = "running", now
        try:
            placed = placed_groups(names) if sweep.kind in ("topology", "sampled") else None
            plan = planner.plan(
                sweep.kind,
                names,
                _preferred(sweep.kind, names, params) or [tuple(p) for p in params.get("pairs") or []],
                rounds=params.get("rounds"),
                seed=params.get("seed", 0),
                groups={n: g for n, (g, _) in placed.items()} if placed is not None else None,
            )
        except (PlanningError, planner.PlanError) as exc:
            _fail(sweep, str(exc))
            return True
        _create_probes(sweep, names, plan)
        if plan.gpu_checks:
            gpus.create_checks(sweep, names)
        sweep.nodes = names
        sweep.total_rounds = len(plan.rounds) + (1 if plan.group or plan.gpu_checks else 0)
        params = {k: v for k, v in params.items() if k not in ("queued_behind", "queued_for_hangs")}
        sweep.params = {
            **params,
            "pair_rounds": len(plan.rounds),
            "group": plan.group,
            "offline_at_start": _offline_at_start(names, now),
        }
        if placed is not None:  # the grouping it ran with, as declared and named then
            members: dict[str, list[str]] = {}
            for n in names:
                members.setdefault(placed[n][0], []).append(n)
            sweep.params["groups"] = members
            sweep.params["groups_from"] = origin_counts(placed)  # declared, measured, ...: what the view says
        if plan.uplinks:  # a topology sweep's uplink rounds (1-based, as probes count them) -> the group sending
            sweep.params["uplink_rounds"] = {str(k + 1): g for k, g in plan.uplinks.items()}
        if sweep.kind == "bisect":
            sweep.params["bisect_phase"] = 1
        if sweep.kind in vocabulary.BANDWIDTH_SWEEP_KINDS or params.get("baseline"):
            sweep.baseline = baselines.resolve_baseline(params.get("baseline"), sweep.backend, params.get("sizes"))
        sweep.save(update_fields=["nodes", "total_rounds", "params", "baseline"])
        broadcast.sweep_update(sweep)
    advance_or_fail(sweep_id)
    return True


def _one_start_at_a_time(sweep_id: int) -> None:
    """Serialize sweep starts for this transaction, so two sweeps over the same nodes never both see
    the other as not running yet: PostgreSQL's advisory lock; on SQLite, a write first (SQLite lets
    one writing transaction in at a time, from its first write on)."""
    if connection.vendor == "postgresql":
        turns.claim()
    else:
        Sweep.objects.filter(pk=sweep_id).update(status=F("status"))


def _running_over(names: list[str], sweep_id: int) -> list[int]:
    """Running sweeps that cover any of ``names``: probes of two sweeps on one node would compete for
    its single command slot and bandwidth, and the second sweep's commands would expire as false timeouts."""
    wanted = set(names)
    running = Sweep.objects.filter(status="running").exclude(pk=sweep_id).values_list("pk", "nodes")
    return sorted(pk for pk, nodes in running if wanted.intersection(nodes or ()))


def _wait_for(sweep: Sweep, busy: list[int], inspecting: list[int] | None = None) -> None:
    """Leave a sweep pending, queued behind the running sweeps it shares nodes with (shown as such), or
    behind the hang diagnoses whose inspect holds one of its nodes (``turns``; at most INSPECT_HOLD_S)."""
    params = {k: v for k, v in sweep.params.items() if k != "queued_for_hangs"} | {"queued_behind": busy}
    params |= {"queued_for_hangs": inspecting} if inspecting else {}
    if sweep.params != params:
        sweep.params = params
        sweep.save(update_fields=["params"])
        broadcast.sweep_update(sweep)
    log.info("sweep %s waits for sweep(s) %s, hang diagnoses %s over some of its nodes", sweep.pk, busy, inspecting)


def start_queued() -> None:
    """Send the start of every sweep queued behind another: called after a sweep ends (after its commit).
    A sweep that still overlaps a running one stays queued; the reaper tries the rest again anyway."""
    for pk, params in Sweep.objects.filter(status="pending").values_list("pk", "params"):
        if (params or {}).get("queued_behind") or (params or {}).get("queued_for_hangs"):
            dispatch.send_to_server(vocabulary.TASK_START_SWEEP, sweep_id=pk)


def _preferred(kind: str, names: list[str], params: dict) -> list[tuple[str, str]] | None:
    """A quick sweep asked to prefer the stalest pairs (a gang check's): every pair among its nodes, measured
    longest ago first (coverage.stalest_first); None for any other, or past planner.PREFERRED_MAX_NODES."""
    if kind != "quick" or not params.get("stalest_first") or len(names) > planner.PREFERRED_MAX_NODES:
        return None
    return coverage.stalest_first(names)


def _sweep_nodes(sweep: Sweep, now: datetime) -> list[str]:
    """The nodes a sweep covers, in plan order: the requested ones, else every active node, online or not."""
    params = sweep.params
    wanted = params.get("nodes")
    if params.get("pairs") and not wanted:
        wanted = list(dict.fromkeys(n for pair in params["pairs"] for n in pair))
    if wanted:
        found = dict(Node.objects.filter(name__in=wanted).values_list("name", "active"))
        unknown = [n for n in wanted if n not in found]
        if unknown:
            raise PlanningError(f"nodes: unknown node(s) {', '.join(unknown[:20])}")
        retired = [n for n in wanted if not found[n]]
        if retired:
            raise PlanningError(f"nodes: retired node(s) {', '.join(retired[:20])}")
        names = list(wanted)
    else:
        # The fleet, not whoever happens to be online: a dead node must fail the sweep, not vanish from it.
        # Less the nodes an operator holds (maintenance, returning): named ones only, so a verification runs.
        names = list(Node.objects.filter(active=True, state=IN_SERVICE).order_by("name").values_list("name", flat=True))
    if sweep.kind == "preflight":
        master = params.get("master") or names[0] if names else None
        if master not in names:
            raise PlanningError(f"master: {master} is not one of the sweep's nodes")
        names = [master] + [n for n in names if n != master]
    return names


def _offline_at_start(names: list[str], now: datetime) -> dict[str, str | None]:
    """The sweep's nodes that were offline when it was planned, with their last heartbeat (ISO, or None)."""
    silent = Node.objects.filter(name__in=names).exclude(Node.online_q(now)).values_list("name", "last_heartbeat")
    return {name: beat and beat.isoformat() for name, beat in sorted(silent)}


def _create_probes(sweep: Sweep, names: list[str], plan: planner.Plan, first_round: int = 1) -> None:
    node_ids = dict(Node.objects.filter(name__in=names).values_list("name", "pk"))
    if connection.vendor == "postgresql":
        _insert_probes(sweep, plan, node_ids, first_round)
        return
    batch = []
    for number, pairs in enumerate(plan.rounds, start=first_round):
        for a, b in pairs:
            batch.append(
                PairProbe(
                    sweep=sweep, round=number, node_a_id=node_ids[a], node_b_id=node_ids[b], backend=sweep.backend
                )
            )
        if len(batch) >= INSERT_BATCH:
            PairProbe.objects.bulk_create(batch)
            batch = []
    PairProbe.objects.bulk_create(batch)


def _insert_probes(sweep: Sweep, plan: planner.Plan, node_ids: dict[str, int], first_round: int) -> None:
    """The plan's pair rows in one statement (PostgreSQL): the rounds and both nodes as three arrays unnested,
    every other column its model default, as ``bulk_create`` would write it. At 1,024 nodes (523,776 rows)
    ``bulk_create`` spent most of its time compiling each row's values in Python."""
    varying: dict[str, list[int]] = {"round": [], "node_a": [], "node_b": []}
    for number, pairs in enumerate(plan.rounds, start=first_round):
        for a, b in pairs:
            varying["round"].append(number)
            varying["node_a"].append(node_ids[a])
            varying["node_b"].append(node_ids[b])
    if not varying["round"]:
        return
    row = PairProbe(sweep=sweep, round=0, node_a_id=0, node_b_id=0, backend=sweep.backend)
    columns, values, constants = [], [], []
    for field in PairProbe._meta.concrete_fields:
        if field.primary_key:
            continue
        db_type = field.db_type(connection)
        columns.append(connection.ops.quote_name(field.column))
        if field.name in varying:
            values.append(f"u.{field.name}")
        else:
            values.append(f"%s::{db_type}")
            constants.append(field.get_db_prep_save(field.pre_save(row, add=True), connection))
    arrays = [(varying[name], PairProbe._meta.get_field(name).db_type(connection)) for name in varying]
    unnest = ", ".join(f"%s::{db_type}[]" for _, db_type in arrays)
    sql = (
        f"INSERT INTO {connection.ops.quote_name(PairProbe._meta.db_table)} ({', '.join(columns)}) "
        f"SELECT {', '.join(values)} FROM unnest({unnest}) WITH ORDINALITY AS u({', '.join(varying)}, n) "
        "ORDER BY u.n"
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, [*constants, *(values_ for values_, _ in arrays)])


def advance(sweep_id: int) -> None:
    """Start the next round if the current one is complete; finish the sweep after the last."""
    while True:
        with transaction.atomic():
            sweep = Sweep.objects.filter(pk=sweep_id, status="running").first()
            if sweep is None:
                return
            k = sweep.current_round
            if k and _round_open(sweep, k):
                return
            if k >= sweep.total_rounds:
                if sweep.kind == "bisect":
                    extended = _next_bisect_phase(sweep)
                    if extended is None:
                        return  # another worker planned the next phase
                    if extended:
                        continue
                first = sweep.total_rounds + 1
                extra = confirming.plan_pass(sweep)
                if extra is None:
                    return  # another worker planned the confirmation pass
                if extra:
                    _create_probes(sweep, sweep.nodes, planner.Plan(sweep.nodes, extra), first_round=first)
                    continue
                finish(sweep)
                return
            if confirming.waiting(sweep, k + 1):
                return  # the pass waits out its settle time; the reaper's tick after it goes on
            if not Sweep.objects.filter(pk=sweep_id, status="running", current_round=k).update(current_round=k + 1):
                return  # another worker advanced it
            sweep.current_round = k + 1
            still_open = rounds.dispatch_round(sweep, k + 1)
        if still_open:
            return


def _next_bisect_phase(sweep: Sweep) -> bool | None:
    """Plan a bisect sweep's next phase after its last round: True if it has one now, False when the
    sweep is done (every suspect pinned, no clean partner left, or its last phase ran), None when
    another worker planned it first. Runs inside advance()'s transaction."""
    phase = sweep.params.get("bisect_phase", 1)
    if phase >= planner.BISECT_MAX_PHASES:
        return False
    outcomes = {}
    for a, b, status, reason in PairProbe.objects.filter(sweep=sweep).values_list(
        "node_a__name", "node_b__name", "status", "reason"
    ):
        if status == "offline" or reason == "agent_offline":
            continue  # the silent node is named already, and tells nothing of its peer
        outcomes[(a, b)] = status in contract.PASSED_STATUSES
    suspects = sweep.params.get("bisect_suspects")
    if suspects is None:  # after the quick phase: the suspects the later phases look into
        suspects = sorted(planner.bisect_suspects(outcomes), key=sweep.nodes.index)
    pairs = planner.bisect_pairs(sweep.nodes, outcomes, suspects)
    if not pairs:
        return False
    rounds = planner.schedule_pairs(pairs, sweep.nodes)
    total, pair_rounds = sweep.total_rounds + len(rounds), sweep.params.get("pair_rounds", 0) + len(rounds)
    params = {**sweep.params, "pair_rounds": pair_rounds, "bisect_phase": phase + 1, "bisect_suspects": suspects}
    if not Sweep.objects.filter(pk=sweep.pk, status="running", total_rounds=sweep.total_rounds).update(
        total_rounds=total, params=params
    ):
        return None
    _create_probes(sweep, sweep.nodes, planner.Plan(sweep.nodes, rounds), first_round=sweep.total_rounds + 1)
    log.info(
        "sweep %s: bisect phase %d, %d pairs around the suspects in %d rounds",
        sweep.pk,
        phase + 1,
        len(pairs),
        len(rounds),
    )
    return True


# The broker or the database away for a moment (a restart, a failover): nothing is wrong with
# the sweep, and the reaper's next pass advances it again. Anything else would fail every pass.
# (The server writes its task messages itself, dispatch._redis_send: a broker away mid-publish raises
# RedisError, and the round's probes are sent again by the reaper, sweeps/outbox.py.)
TRANSIENT_ERRORS = (redis.RedisError, OperationalError, InterfaceError)


def _fail_broken(sweep_id: int, step: str, exc: Exception) -> None:
    """End a sweep that raised instead of leaving it open, where every later pass would raise again."""
    log.exception("sweep %s: %s failed", sweep_id, step)
    try:
        with transaction.atomic():
            sweep = Sweep.objects.filter(pk=sweep_id).first()
            if sweep is not None:
                _fail(sweep, f"{step} failed: {type(exc).__name__}: {exc}")
    except Exception:  # the database itself is gone: the next pass tries again
        log.exception("sweep %s: could not be marked failed", sweep_id)


def advance_or_fail(sweep_id: int) -> bool:
    """advance(), isolated: a sweep that cannot go on ends failed with the reason; others carry on."""

    def step() -> bool:
        advance(sweep_id)
        return True

    return _isolated(sweep_id, "advancing", step)


def start_or_fail(sweep_id: int) -> bool:
    """start_sweep(), isolated the same way."""
    return _isolated(sweep_id, "starting", lambda: start_sweep(sweep_id))


def _isolated(sweep_id: int, doing: str, step: Callable[[], bool]) -> bool:
    """step()'s answer; False after a transient error (the reaper tries again) or any other (the sweep fails)."""
    try:
        return step()
    except TRANSIENT_ERRORS:
        log.warning("sweep %s: %s it met a transient error; the reaper tries again", sweep_id, doing, exc_info=True)
        return False
    except Exception as exc:
        _fail_broken(sweep_id, f"{doing} the sweep", exc)
        return False


def _round_open(sweep: Sweep, k: int) -> bool:
    if rounds.is_pair_round(sweep, k):
        return PairProbe.objects.filter(sweep=sweep, round=k, status__in=OPEN_PAIR_STATUSES).exists()
    if sweep.kind in vocabulary.GPU_SWEEP_KINDS:
        return gpus.any_open(sweep)
    return GroupProbe.objects.filter(sweep=sweep, status__in=OPEN_PAIR_STATUSES).exists()


def finish(sweep: Sweep) -> bool:
    """Compute findings and the verdict, and close the sweep (once)."""
    now = timezone.now()
    if not Sweep.objects.filter(pk=sweep.pk, status="running").update(status="finished", finished=now):
        return False
    told = confirming.fold(sweep)  # before the findings: they read each pair's final status
    found, statuses = findings.sweep_findings(sweep)
    found += told
    verdict = verdicts.verdict(statuses, found)
    Finding.objects.bulk_create([Finding(sweep=sweep, **f) for f in found])
    Sweep.objects.filter(pk=sweep.pk).update(verdict=verdict)
    sweep.status, sweep.verdict, sweep.finished = "finished", verdict, now
    matrices.store_matrix(sweep)
    broadcast.sweep_update(sweep)
    # Alerts and Slurm act in their own tasks after the commit: a slow webhook or
    # scontrol must never hold the sweep open, and they must see the findings.
    actions_tasks.sweep_finished(sweep.pk)  # recorded with the verdict, sent after the commit
    transaction.on_commit(start_queued)
    if statistics.worth_analyzing(len(statuses)):  # the sweep an operator opens next is read with fresh statistics
        transaction.on_commit(lambda: dispatch.send_to_server(vocabulary.TASK_ANALYZE_PAIRS))
    log.info("sweep %s finished: %s (%d findings)", sweep.pk, verdict, len(found))
    return True


def cancel(sweep_id: int) -> bool:
    """Cancel an open sweep: open probes become skipped (reason cancelled); late results are ignored."""
    now = timezone.now()
    with transaction.atomic():
        if not Sweep.objects.filter(pk=sweep_id, status__in=Sweep.OPEN_STATUSES).update(
            status="cancelled", verdict="unknown", finished=now
        ):
            return False
        for model in (PairProbe, GroupProbe, GpuCheck):
            model.objects.filter(sweep_id=sweep_id, status__in=OPEN_PAIR_STATUSES).update(
                status="skipped", reason="cancelled", finished=now
            )
        sweep = Sweep.objects.get(pk=sweep_id)
        confirming.drop_pass(sweep)  # cut short: its pairs keep their first outcome, each shown once
        broadcast.sweep_update(sweep)
        actions_tasks.sweep_ended(sweep)
        transaction.on_commit(start_queued)
    return True


def stalled_sweeps() -> list[int]:
    """Running sweeps whose current round has nothing open: a lost advance the reaper re-runs."""
    out = []
    for sweep in Sweep.objects.filter(status="running").only("pk", "current_round", "params", "total_rounds"):
        if not _round_open(sweep, sweep.current_round) if sweep.current_round else True:
            out.append(sweep.pk)
    return out


def forgotten_pending(now: datetime | None = None, older_than_s: float = FORGOTTEN_PENDING_S) -> list[int]:
    """Pending sweeps nobody started (the start task was lost); the reaper starts them."""
    cutoff = (now or timezone.now()) - timedelta(seconds=older_than_s)
    return list(Sweep.objects.filter(Q(status="pending") & Q(created__lt=cutoff)).values_list("pk", flat=True))
