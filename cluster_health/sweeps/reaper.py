"""The reaper: turns silence into results so that no sweep ever stalls.

Run by beat every REAPER_INTERVAL_S on the server worker; it is the one place that
decides a node is silent or a probe overdue (``sweep --wait`` only reads rows).
Probes committed running whose commands a killed worker never sent are sent
again first (``outbox``). Open probes with a node whose heartbeats stopped become ``offline`` once the peer's
half is in (or the peer is silent too); open probes
past their deadline become ``timeout`` (keeping what the half that did arrive
said). Then sweeps whose current round is complete are advanced, which repairs
an advance lost with a worker. Every close is a conditional UPDATE, so the
reaper racing ingest closes a probe once.
"""

from __future__ import annotations

import logging

from django.db.models import Q
from django.utils import timezone

from agents import contract
from cluster_health.actions import tasks as actions_tasks
from cluster_health.core import merge
from cluster_health.models import GpuCheck, GroupProbe, Node, PairProbe
from cluster_health.queues.backlog import Backlog, server_backlog
from cluster_health.sweeps import closing, gpus, lifecycle, outbox

log = logging.getLogger(__name__)


def reap(now=None, judge: bool | None = None) -> dict:
    """Close what is overdue or offline and advance sweeps; returns counts of what it did.

    Judges against what the server has been sent, not only what it has applied: a node
    with a heartbeat or result still waiting for a worker (queued, or fetched and not
    acked) is not silent, and a probe with a result waiting from one of its own nodes is
    not overdue. Every node's ingest list is read in full (each is capped), so whatever
    one node sends defers only its own judgements. When the
    queue is too long to read (a worker outage's backlog) or the broker cannot be asked,
    nothing is judged, deadlines included: the judgement is deferred until the server
    has worked through it, and then sees every row those messages wrote. Complete rounds
    are advanced meanwhile. ``judge`` overrides the check (tests).
    """
    now = now or timezone.now()
    backlog = Backlog()
    anything = _anything_to_judge(now)
    if judge is None and not anything and not lifecycle.forgotten_pending(now):
        # Nothing overdue, nobody silent in an open probe, no pending sweep forgotten: no judgement can fall
        # at this ``now`` (rows only move away from one), so the backlog, which only spares rows from one, is
        # not read: it reads every waiting half (up to 2,048 at 1,024 nodes) on every tick, a cost that grows with
        # the fleet twice over (docs/BENCHMARKS.md, "Fleet at 1,024 nodes").
        judge = False
    if judge is None:
        # Read before the rows: a message applied in between is then seen in one or the other.
        read = server_backlog(settle=False)
        judge = read is not None and read.complete
        backlog = read or backlog
    counts = {"timeout": 0, "offline": 0, "groups": 0, "gpu_checks": 0, "advanced": 0, "started": 0}
    counts["resent"] = outbox.resend_unsent(now)  # before judging: a resent probe has a fresh deadline
    counts["actions_resent"] = actions_tasks.resend_lost(now)
    if judge and backlog.unverified and anything:
        # A waiting message's signature is checked only where it could spare a node or a probe: in a
        # healthy sweep nothing is overdue and nobody silent, and a round's waiting halves (up to
        # 1,024 signatures every REAPER_INTERVAL_S) were a quarter of the server worker's time.
        backlog.settle()
    touched = judge_silence_and_deadlines(now, counts, backlog) if judge else set()
    # Each sweep on its own (own transaction, own try): one that cannot go on ends failed, the rest advance.
    for sweep_id in set(lifecycle.stalled_sweeps()) | touched:
        lifecycle.advance_or_fail(sweep_id)
        counts["advanced"] += 1
    for sweep_id in lifecycle.forgotten_pending(now) if judge else []:
        if sweep_id not in backlog.sweeps and lifecycle.start_or_fail(sweep_id):
            counts["started"] += 1
    if any(counts[k] for k in ("timeout", "offline", "groups", "gpu_checks", "started", "resent")):
        log.info("reaper: %s", counts)
    return counts


def _anything_to_judge(now) -> bool:
    """Whether a judgement below may fall: a node silent in an open probe or check, a probe or check
    past its deadline, or a group collective running. Rows only move away from this (heartbeats
    come later, deadlines are fixed against ``now``), so none appears between this and the judgement."""
    silent_ids = Node.objects.filter(Q(last_heartbeat__lt=Node.online_cutoff(now)) | Q(last_heartbeat__isnull=True))
    silent_ids = silent_ids.values("pk")
    overdue_or_silent = Q(deadline__lt=now)
    return (
        PairProbe.objects.filter(status="running")
        .filter(overdue_or_silent | Q(node_a_id__in=silent_ids) | Q(node_b_id__in=silent_ids))
        .exists()
        or GpuCheck.objects.filter(status="running").filter(overdue_or_silent | Q(node_id__in=silent_ids)).exists()
        or GroupProbe.objects.filter(status="running").exists()
    )


def judge_silence_and_deadlines(now, counts: dict, backlog: Backlog) -> set[int]:
    """Close probes of silent nodes and probes past their deadline; returns the sweeps touched.

    A node with a message waiting is not silent, and a probe with a result waiting is not overdue.
    """
    cutoff = Node.online_cutoff(now)
    silent = Q(last_heartbeat__lt=cutoff) | Q(last_heartbeat__isnull=True)
    offline_ids = set(Node.objects.filter(silent).exclude(name__in=backlog.nodes).values_list("pk", flat=True))
    # A node gone mid-probe closes its pair early only once the peer has spoken (or is gone too):
    # the live peer's half, due by its deadline, says where the probe broke.
    peer_a_done = Q(half_a__isnull=False) | Q(node_a_id__in=offline_ids)
    peer_b_done = Q(half_b__isnull=False) | Q(node_b_id__in=offline_ids)
    due = list(
        PairProbe.objects.filter(status="running")
        .filter(
            Q(deadline__lt=now)
            | Q(node_a_id__in=offline_ids, half_a__isnull=True) & peer_b_done
            | Q(node_b_id__in=offline_ids, half_b__isnull=True) & peer_a_done
        )
        .exclude(pk__in=_waiting_pairs(backlog))
        .select_related("node_a", "node_b")
    )
    touched: set[int] = set()
    rows = closing.probe_rows([probe.pk for probe in due])
    results = {
        probe.pk: merge.close_unanswered(
            probe.half_a,
            probe.half_b,
            (probe.node_a.name, probe.node_b.name),
            offline=(probe.node_a_id in offline_ids, probe.node_b_id in offline_ids),
            deadline_s=(probe.deadline - probe.started).total_seconds() if probe.started else None,
        )
        for probe in due
    }
    for pk, fields in closing.close_pairs(rows, results, now).items():
        counts[fields["status"]] = counts.get(fields["status"], 0) + 1
        touched.add(rows[pk].sweep_id)
    touched |= _close_overdue_groups(now, offline_ids, backlog, counts)
    named = backlog.named("gpu")
    checks = GpuCheck.objects.filter(pk__in=named).values_list("pk", "node__name") if named else []
    touched |= gpus.reap(now, offline_ids, backlog.waiting("gpu", {pk: [node] for pk, node in checks}), counts)
    return touched


def _waiting_pairs(backlog: Backlog) -> set[int]:
    """Pair probes with a half waiting from one of their two nodes (a half naming another node's probe defers nothing)."""
    named = backlog.named("pair")
    if not named:
        return set()
    rows = PairProbe.objects.filter(pk__in=named).values_list("pk", "node_a__name", "node_b__name")
    return backlog.waiting("pair", {pk: (a, b) for pk, a, b in rows})


def _close_overdue_groups(now, offline_ids: set[int], backlog: Backlog, counts: dict) -> set[int]:
    """Close group probes with a member gone silent or past their deadline; returns the sweeps touched."""
    touched: set[int] = set()
    offline_names = set(Node.objects.filter(pk__in=offline_ids).values_list("name", flat=True))
    for group in GroupProbe.objects.filter(status="running").select_related("sweep"):
        if backlog.waiting("group", {group.pk: group.nodes}):
            continue
        missing = [n for r, n in enumerate(group.nodes) if str(r) not in group.halves]
        gone = [n for n in missing if n in offline_names]
        if not gone and (group.deadline is None or group.deadline >= now):
            continue
        arrived = list(group.halves.values())
        if gone:
            merged = {
                "status": "offline",
                "reason": "agent_offline",
                "stage": None,
                "hint": f"{', '.join(gone[:10])} went offline during the group collective",
            }
        else:
            failed = [h for h in arrived if h["status"] not in contract.HARMLESS_STATUSES]
            worst = merge.merge_many(failed) if failed else {}
            ranks = ", ".join(str(group.nodes.index(n)) for n in missing[:10])
            merged = {
                "status": "timeout",
                "stage": worst.get("stage"),
                "reason": worst.get("reason") or "probe_crashed",
                "hint": worst.get("hint") or f"rank(s) {ranks} ({', '.join(missing[:10])}) sent no result",
            }
        if closing.close_group(group, merged, now):
            counts["groups"] += 1
            touched.add(group.sweep_id)
    return touched
