"""What operators say about nodes and findings, and the audit log that keeps every word of it.

A node in ``maintenance`` is out of fleet sweeps, alerts and Slurm actions. Its return to
service is a ``pairs`` sweep of it with healthy partners (a verification sweep, bandwidth
measured): while it runs the node is ``returning``, still out of alerts and drains; once the
sweep has finished, judged as any sweep is, the node is back in service only if every pair of
it passed and no confirmed fail finding names it, and only then are cluster-health's own
Slurm drains of it resumed. Otherwise it stays in maintenance, saying why.

A finding ``acknowledged`` with a note keeps its alert from being sent again while the
finding stays the same: a later sweep's finding for the same subject and code with another
severity or text ends the acknowledgement.

Every change is an AuditEntry written in the same transaction as the change.
The page, the API and ``manage.py nodes`` are thin callers of this module.
"""

from __future__ import annotations

import logging

from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from cluster_health.actions.models import Alert, SlurmDrain
from cluster_health.models import (
    IN_SERVICE,
    MAINTENANCE,
    RETURNING,
    Acknowledgement,
    AuditEntry,
    Finding,
    Node,
    PairProbe,
    Sweep,
)
from cluster_health.nodes import registered

log = logging.getLogger(__name__)
MAX_REASON = 300  # Node.state_reason
MAX_NOTE = 1000
VERIFY_PARTNERS = 2  # two agreeing partners tell a node's fault from a link's (planner.BISECT_PARTNERS)
PASSING = ("ok", "degraded", "transient", "contended")  # worked, or bad once and fine when looked at again


class OperatorError(ValueError):
    """An operator action that cannot be done as asked; the text says why, and nothing changed."""


def clean_text(text, what: str, limit: int) -> str:
    """A reason or note from a request: text, not empty, at most ``limit`` characters, no control characters."""
    if not isinstance(text, str) or not text.strip():
        raise OperatorError(f"{what}: say why (1..{limit} characters)")
    text = text.strip()
    if len(text) > limit:
        raise OperatorError(f"{what}: at most {limit} characters, got {len(text)}")
    if any(ord(c) < 32 and c not in "\n\t" for c in text) or "\x7f" in text:
        raise OperatorError(f"{what}: control characters are not allowed")
    return text


def actor_of(user) -> str:
    """The name an audit entry gives a request's user."""
    return user.get_username() if user is not None and user.is_authenticated else ""


def record(action: str, subject: str, *, actor: str, source: str, text: str = "", sweep=None) -> AuditEntry:
    return AuditEntry.record(action, subject, actor=actor, source=source, text=text, sweep=sweep)


def held(names) -> dict[str, str]:
    """Node name -> its state, for the named nodes that are not in service (maintenance or returning)."""
    return Node.held(names)


@transaction.atomic
def set_maintenance(name: str, reason, *, actor: str, source: str) -> Node:
    """Put a node in maintenance (again, with a new reason, if it already is); a return under way is dropped."""
    reason = clean_text(reason, "reason", MAX_REASON)
    node = registered([name])[name]
    now = timezone.now()
    Node.objects.filter(pk=node.pk).update(
        state=MAINTENANCE, state_reason=reason, state_by=actor, state_since=now, return_sweep=None
    )
    record("maintenance", name, actor=actor, source=source, text=reason)
    node.refresh_from_db()
    return node


def healthy_partners(node: Node, count: int = VERIFY_PARTNERS) -> list[str]:
    """Nodes to verify ``node`` against: in service, online, not drained by cluster-health, no open alert."""
    candidates = list(
        Node.objects.filter(Node.online_q(), active=True, state=IN_SERVICE)
        .exclude(pk=node.pk)
        .order_by("name")
        .values_list("name", flat=True)
    )
    troubled = set(SlurmDrain.objects.filter(status="drained", node__in=candidates).values_list("node", flat=True))
    for key in Alert.objects.filter(status="open", kind__in=("node", "offline")).values_list("key", flat=True):
        troubled.add(key.partition(":")[2])
    healthy = [n for n in candidates if n not in troubled]
    # The same group first: the links a job on the node will use most.
    same = [n for n in healthy if node.topology_group and _group(n) == node.topology_group]
    return (same + [n for n in healthy if n not in same])[:count]


def _group(name: str) -> str:
    return Node.objects.filter(name=name).values_list("topology_group", flat=True).first() or ""


def return_to_service(name: str, *, actor: str, source: str, user=None) -> Sweep:
    """Start a node's verification sweep; it returns to service when the sweep passes it (conclude_returns)."""
    from cluster_health.sweeps.request import request_sweep

    node = registered([name])[name]
    if node.state == IN_SERVICE:
        raise OperatorError(f"{name} is in service already")
    if node.state == RETURNING and node.return_sweep_id:
        running = Sweep.objects.filter(pk=node.return_sweep_id, status__in=Sweep.OPEN_STATUSES).exists()
        if running:
            raise OperatorError(f"{name} is returning already: verification sweep #{node.return_sweep_id}")
    if not node.active:
        raise OperatorError(f"{name} is retired: activate it first")
    partners = healthy_partners(node)
    if not partners:
        raise OperatorError(f"no healthy partner is online to verify {name} against; it stays in maintenance")
    with transaction.atomic():
        sweep = request_sweep(
            source="page" if source == "page" else ("api" if source == "api" else "command"),
            user=user,
            kind="pairs",
            pairs=[[name, p] for p in partners],
        )
        Node.objects.filter(pk=node.pk).update(state=RETURNING, return_sweep=sweep)
        record(
            "return_requested",
            name,
            actor=actor,
            source=source,
            text=f"verification sweep #{sweep.pk} with {', '.join(partners)}",
            sweep=sweep,
        )
    return sweep


def verification(sweep: Sweep, name: str) -> tuple[bool, str]:
    """Whether a finished sweep passed a node: every measured pair of it worked, no fail finding names it."""
    from cluster_health.actions import blame

    if sweep.status != "finished":
        return False, f"sweep #{sweep.pk} {sweep.status}"
    pairs = list(
        PairProbe.objects.filter(Q(node_a__name=name) | Q(node_b__name=name), sweep=sweep)
        .exclude(status="skipped")
        .values_list("node_a__name", "node_b__name", "status")
    )
    if not pairs:
        return False, f"sweep #{sweep.pk} measured no pair of {name}"
    bad = [f"{a}<->{b} {status}" for a, b, status in pairs if status not in PASSING]
    names = set(sweep.nodes)
    named = [
        text
        for subject, text in sweep.findings.filter(severity="fail").values_list("subject", "text")
        if name in blame.ends(subject, names)
    ]
    if bad or named:
        return False, "; ".join(named + bad)[:MAX_REASON]
    return True, f"sweep #{sweep.pk}: {len(pairs)} pair(s) passed"


def conclude_returns(sweep: Sweep) -> list[str]:
    """After a sweep ended: the nodes it verified go back in service if it passed them (their Slurm drains by
    cluster-health resumed), else back to maintenance with the reason. Idempotent; returns what was done."""
    from cluster_health.actions import slurm

    done = []
    for node in Node.objects.filter(state=RETURNING, return_sweep=sweep):
        passed, why = verification(sweep, node.name)
        now = timezone.now()
        with transaction.atomic():
            if passed:
                moved = Node.objects.filter(pk=node.pk, state=RETURNING, return_sweep=sweep).update(
                    state=IN_SERVICE, state_reason="", state_since=now
                )
                if moved:
                    record("returned", node.name, actor="", source="server", text=why, sweep=sweep)
            else:
                reason = f"verification sweep #{sweep.pk} did not pass: {why}"[:MAX_REASON]
                moved = Node.objects.filter(pk=node.pk, state=RETURNING, return_sweep=sweep).update(
                    state=MAINTENANCE, state_reason=reason, state_since=now
                )
                if moved:
                    record("return_failed", node.name, actor="", source="server", text=reason, sweep=sweep)
        if not moved:
            continue
        done.append(f"{node.name}: {'returned to service' if passed else 'stays in maintenance'}")
        if passed:
            done += slurm.resume_node(node.name, sweep)
    return done


def active_acknowledgement(subject: str, code: str) -> Acknowledgement | None:
    return Acknowledgement.objects.filter(subject=subject, code=code, ended__isnull=True).first()


@transaction.atomic
def acknowledge(finding: Finding, note, *, actor: str, source: str) -> Acknowledgement:
    """Acknowledge a finding (its subject and code, as it reads now); a second one replaces the note."""
    note = clean_text(note, "note", MAX_NOTE)
    if finding.severity == "info":
        raise OperatorError("an info finding raises no alert: nothing to acknowledge")
    now = timezone.now()
    Acknowledgement.objects.filter(subject=finding.subject, code=finding.code, ended__isnull=True).update(
        ended=now, ended_why="acknowledged again"
    )
    ack = Acknowledgement.objects.create(
        finding=finding,
        subject=finding.subject,
        code=finding.code,
        severity=finding.severity,
        text=finding.text,
        note=note,
        by=actor,
    )
    record(
        "acknowledge", finding.subject, actor=actor, source=source, text=f"{finding.code}: {note}", sweep=finding.sweep
    )
    return ack


@transaction.atomic
def unacknowledge(ack: Acknowledgement, *, actor: str, source: str, why: str = "taken back", sweep=None) -> bool:
    if not Acknowledgement.objects.filter(pk=ack.pk, ended__isnull=True).update(
        ended=timezone.now(), ended_by=sweep, ended_why=why[:300]
    ):
        return False
    record("unacknowledge", ack.subject, actor=actor, source=source, text=f"{ack.code}: {why}", sweep=sweep)
    return True


def review_acknowledgements(sweep: Sweep) -> int:
    """End the acknowledgements whose finding this sweep saw changed (another severity or text)."""
    ended = 0
    acks = list(Acknowledgement.objects.filter(ended__isnull=True))
    if not acks:
        return 0
    found: dict[tuple[str, str], list[tuple[str, str]]] = {}
    for subject, code, severity, text in sweep.findings.filter(code__in={a.code for a in acks}).values_list(
        "subject", "code", "severity", "text"
    ):
        found.setdefault((subject, code), []).append((severity, text))
    for ack in acks:
        seen = found.get((ack.subject, ack.code))
        if seen and (ack.severity, ack.text) not in seen:
            severity, text = seen[0]
            why = f"sweep #{sweep.pk} found it changed: {severity}: {text}"
            ended += unacknowledge(ack, actor="", source="server", why=why, sweep=sweep)
    return ended


def acknowledged(keys) -> set[tuple[str, str]]:
    """The (subject, code) pairs of ``keys`` acknowledged now."""
    return Acknowledgement.active_keys(keys)


def after_sweep(sweep: Sweep) -> list[str]:
    """What a finished sweep changes of the operator states: returns concluded, acknowledgements reviewed."""
    done = conclude_returns(sweep)
    ended = review_acknowledgements(sweep)
    if ended:
        done.append(f"{ended} acknowledgement(s) ended: their finding changed")
    return done
