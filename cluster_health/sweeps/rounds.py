"""Dispatching one round: its probes marked running with a rendezvous and a deadline, commands sent after the commit.

The probes are marked sent once their commands are published; ``sweeps.outbox``
sends again what a killed worker committed but never sent.

A probe whose node is offline when its round starts closes ``offline`` at once
instead of being sent: nobody would answer it. Its hint says when the node was
last heard from. A group collective with an offline member closes ``offline``
too: the rest of the fleet alone would pass a collective the job cannot run.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import NamedTuple

from django.db import transaction
from django.utils import timezone

from cluster_health import bulk, vocabulary
from cluster_health.core import fleet
from cluster_health.models import GroupProbe, Node, PairProbe, Sweep
from cluster_health.queues import backlog, dispatch
from cluster_health.shapes import broadcast, pairs
from cluster_health.sweeps import gpus

# What a round's dispatch reads of its pair rows: what it writes, what its commands and its broadcast name.
DISPATCH_FIELDS = (
    *pairs.PAIR_MODEL_FIELDS,
    "rendezvous",
    "started",
    "deadline",
    "finished",
    "node_a__name",
    "node_a__address",
    "node_b__name",
    "node_b__address",
)


class Member(NamedTuple):
    name: str
    address: str


class PendingPair:
    """A pending pair row as the dispatch reads it (plain values: a 1,024-node round is 512 rows, and a model
    instance with its two nodes cost more to build than the rest of the round's dispatch): what its commands,
    its write and its broadcast use, under PairProbe's field names."""

    # The row's own fields, as DISPATCH_FIELDS names them (its id as pk), and its two nodes.
    __slots__ = ("pk", "node_a", "node_b", *(f for f in DISPATCH_FIELDS if "__" not in f and f != "id"))
    pk: int
    node_a: Member
    node_b: Member
    round: int
    status: str
    stage: str | None
    reason: str | None
    latency_us_p50: float | None
    algbw_gbps: float | None
    busbw_gbps: float | None
    hint: str | None
    evidence: dict | None
    rendezvous: str
    started: datetime | None
    deadline: datetime | None
    finished: datetime | None

    def __init__(self, row: dict):
        self.pk = row["id"]
        self.node_a = Member(row["node_a__name"], row["node_a__address"])
        self.node_b = Member(row["node_b__name"], row["node_b__address"])
        for field in self.__slots__[3:]:
            setattr(self, field, row[field])

    @property
    def id(self) -> int:
        return self.pk


def dispatch_round(sweep: Sweep, k: int) -> bool:
    """Mark round k's probes running and send their commands after commit. True if any is open."""
    now = timezone.now()
    beats = dict(Node.objects.filter(name__in=sweep.nodes).values_list("name", "last_heartbeat"))
    cutoff = Node.online_cutoff(now)
    online = {name for name, beat in beats.items() if beat is not None and beat >= cutoff}
    silent = [name for name in sweep.nodes if name not in online]
    if silent:
        # A message from a node that looks silent may be waiting on the server. The backlog is read
        # before their rows again, as the reaper reads them: a heartbeat applied in between is in one or the other.
        waiting = backlog.unheard_is_not_silent(silent)
        again = dict(Node.objects.filter(name__in=silent).values_list("name", "last_heartbeat"))
        beats.update(again)
        online |= waiting | {name for name, beat in again.items() if beat is not None and beat >= cutoff}

    def offline_hint(names: list[str]) -> str:
        return "; ".join(fleet.offline_hint(n, beats.get(n), now) for n in names)

    if sweep.kind in vocabulary.GPU_SWEEP_KINDS:
        return gpus.dispatch_checks(sweep, online, now, offline_hint)
    if not is_pair_round(sweep, k):
        return _dispatch_group(sweep, online, now, offline_hint)
    kind, settings_ = pair_settings(sweep)
    wait = timedelta(seconds=dispatch.server_deadline_s(settings_["deadline_s"]))
    commands, updated = [], []
    rows = PairProbe.objects.filter(sweep=sweep, round=k, status="pending").order_by("id")
    for probe in map(PendingPair, rows.values(*DISPATCH_FIELDS)):  # not the nodes' facts, nor a pair's halves
        a, b = probe.node_a, probe.node_b
        gone = [n.name for n in (a, b) if n.name not in online]
        if gone:
            probe.status, probe.reason, probe.finished = "offline", "agent_offline", now
            probe.hint = offline_hint(gone)
        else:
            probe.status, probe.rendezvous, probe.started, probe.deadline = (
                "running",
                dispatch.new_rendezvous(),
                now,
                now + wait,
            )
            commands += pair_commands(sweep, probe, kind, settings_)
        updated.append(probe)
    _write_if_pending(updated, "running", "rendezvous", {"started": now, "deadline": now + wait})
    _write_if_pending(updated, "offline", "hint", {"reason": "agent_offline", "finished": now})
    running = [p.pk for p in updated if p.status == "running"]
    transaction.on_commit(lambda: dispatch.send_probe_commands(PairProbe, running, commands))
    broadcast.sweep_update(sweep, [pairs.pair_dict_of(p) for p in updated], throttle=True)
    return bool(running)


def is_pair_round(sweep: Sweep, k: int) -> bool:
    """Whether round k runs pair probes: a planned pair round, or one of the confirmation pass's (after the group's)."""
    first = sweep.params.get("confirm_first")
    return k <= sweep.params.get("pair_rounds", 0) or (first is not None and k >= first)


def pair_settings(sweep: Sweep) -> tuple[str, dict]:
    """The command kind and settings of a sweep's pair probes."""
    kind = "discover" if sweep.kind in vocabulary.DISCOVER_SWEEP_KINDS else "pair"
    return kind, dispatch.probe_settings(sweep.params, sweep.last_stage, kind)


def pair_commands(sweep: Sweep, probe: PairProbe | PendingPair, kind: str, settings_: dict) -> list[dict]:
    """The two commands of a pair probe (rank 0: node_a)."""
    a, b = probe.node_a, probe.node_b
    return dispatch.build_commands(sweep, kind, probe, [(a.name, a.address), (b.name, b.address)], settings_)


def group_commands(sweep: Sweep, group: GroupProbe) -> tuple[list[dict], float]:
    """The commands of a group probe, one per member, and the seconds the server waits for them."""
    addresses = dict(Node.objects.filter(name__in=group.nodes).values_list("name", "address"))
    last_stage = "collective" if group.kind == "preflight" else sweep.last_stage
    settings_ = dispatch.probe_settings(sweep.params, last_stage)
    commands = dispatch.build_commands(
        sweep,
        group.kind,
        group,
        [(n, addresses[n]) for n in group.nodes],
        settings_,
        master_port=sweep.params.get("master_port") if group.kind == "preflight" else None,
        env=sweep.params.get("env"),
    )
    return commands, dispatch.server_deadline_s(settings_["deadline_s"])


def _write_if_pending(probes: list[PendingPair], status: str, own_field: str, constants: dict) -> None:
    """Save the probes now in status (each its own_field, all the constants) whose rows are still pending."""
    bulk.conditional_update(
        PairProbe,
        {p.pk: {own_field: getattr(p, own_field)} for p in probes if p.status == status},
        where="t.status = %s",
        where_params=["pending"],
        constants={"status": status, **constants},
    )


def _dispatch_group(sweep: Sweep, online: set, now, offline_hint) -> bool:
    kind = "preflight" if sweep.kind == "preflight" else "group"
    members = list(sweep.nodes)
    group = GroupProbe.objects.create(
        sweep=sweep, kind=kind, nodes=members, backend=sweep.backend, rendezvous=dispatch.new_rendezvous(), started=now
    )
    offline = [n for n in members if n not in online]
    if offline:
        GroupProbe.objects.filter(pk=group.pk).update(
            status="offline",
            reason="agent_offline",
            finished=now,
            hint=f"{offline_hint(offline[:10])}: "
            f"{', '.join(f'{n} (rank {members.index(n)})' for n in offline[:10])} would never join",
        )
        return False
    commands, wait_s = group_commands(sweep, group)
    GroupProbe.objects.filter(pk=group.pk).update(status="running", deadline=now + timedelta(seconds=wait_s))
    transaction.on_commit(lambda: dispatch.send_probe_commands(GroupProbe, [group.pk], commands))
    broadcast.sweep_update(sweep)
    return True
