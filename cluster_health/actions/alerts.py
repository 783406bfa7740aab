"""Which problems a finished sweep opens or clears, and the alert messages for them.

Problem identity (Alert.key): ``node:NAME`` and ``link:A<->B`` from network sweeps'
findings, ``gpu:NAME`` from gpu sweeps, ``verdict:KIND`` when a kind's verdict gets
worse than the previous sweep of that kind, ``offline:NAME`` for an agent silent past
CLUSTER_HEALTH_ALERT_OFFLINE_AFTER_S. A sweep's alert is at ``fail`` only where its
evidence was confirmed (cluster_health/actions/blame.py): a fail finding seen once alerts
at ``warn``. A problem is cleared only by a later sweep that looked at it again, so a
quick sweep of two nodes does not resolve a third node's alert.
"""

from __future__ import annotations

import logging
from datetime import timedelta

from django.conf import settings
from django.db import IntegrityError, transaction
from django.urls import reverse
from django.utils import timezone

from cluster_health import vocabulary
from cluster_health.actions import blame
from cluster_health.actions.models import Alert, AlertChannel, AlertDelivery
from cluster_health.models import Acknowledgement, Node, PairProbe, Sweep

log = logging.getLogger(__name__)
VERDICT_RANK = {"pass": 0, "warn": 1, "fail": 2}  # unknown compares with nothing
MEASURED_STATUSES = ("ok", "degraded", *vocabulary.CONFIRMATION_STATUSES, "failed", "timeout", "offline")
SEVERITY_RANK = {"info": 0, "warn": 1, "fail": 2}
# A fail finding the confirmation pass did not see again alerts at warn, saying so (cluster_health/actions/blame.py).
UNCONFIRMED = "seen once, not confirmed by a second look: a warning, not paged at fail"


def _url(name: str, *args) -> str:
    return settings.BASE_URL + reverse(name, args=args)


def _family(sweep: Sweep) -> str:
    return "gpu" if sweep.kind == "gpu" else "node"


def sweep_problems(sweep: Sweep, confirmed: set[int]) -> tuple[dict[str, dict], set[str]]:
    """The problems this sweep found (key -> problem) and every key it looked at (found or not).

    ``confirmed``: the ids of its fail findings backed by confirmed evidence (blame.confirmed_findings).
    """
    family = _family(sweep)
    names = set(sweep.nodes)
    probed = {
        (a, b)
        for a, b in PairProbe.objects.filter(sweep=sweep, status__in=MEASURED_STATUSES).values_list(
            "node_a__name", "node_b__name"
        )
    }
    looked = {f"{family}:{n}" for n in names}
    looked |= {f"link:{_link_key(a, b)}" for a, b in probed}
    problems: dict[str, dict] = {}
    repeat: dict[str, str] = {}  # key -> its repeat-offender finding's text, added to the alert's own
    for f in sweep.findings.filter(severity__in=("warn", "fail")).order_by("pk"):
        severity, text = f.severity, f.text
        if severity == "fail" and f.pk not in confirmed:
            severity, text = "warn", f"{text} ({UNCONFIRMED})"
        if f.subject in names:
            key, kind, url = f"{family}:{f.subject}", family, _url("node", f.subject)
        elif "<->" in f.subject:
            a, _, b = f.subject.partition("<->")
            if a not in names or b not in names:
                continue
            key, kind, url = f"link:{_link_key(a, b)}", "link", _url("pair", *sorted((a, b)))
        else:
            continue  # cluster-wide findings speak through the verdict alert
        if f.code == "repeat_offender":
            repeat[key] = f.text
        have = problems.get(key)
        if have is None or SEVERITY_RANK[severity] > SEVERITY_RANK[have["severity"]]:
            problems[key] = {
                "key": key,
                "kind": kind,
                "subject": f.subject,
                "severity": severity,
                "reason": f.code,
                "text": text,
                "url": url,
            }
    for problem in problems.values():
        if problem["reason"] != "repeat_offender" and problem["key"] in repeat:
            problem["text"] = f"{problem['text']}; {repeat[problem['key']]}"
    return problems, looked


def _link_key(a: str, b: str) -> str:
    return "<->".join(sorted((a, b)))


def _verdict_change(sweep: Sweep, confirmed: set[int]) -> tuple[dict | None, bool]:
    """(a verdict problem to open, whether an open verdict alert of this kind clears)."""
    key = f"verdict:{sweep.kind}"
    now_rank = VERDICT_RANK.get(sweep.verdict)
    if now_rank is None:
        return None, False
    previous = (
        Sweep.objects.filter(kind=sweep.kind, status="finished", pk__lt=sweep.pk)
        .exclude(verdict="unknown")
        .order_by("-pk")
        .values_list("verdict", flat=True)
        .first()
    )
    open_alert = Alert.objects.filter(key=key, status="open").first()
    if open_alert is not None:
        before = VERDICT_RANK.get(open_alert.data.get("previous_verdict"), 0)
        return None, now_rank <= before
    if previous is None or now_rank <= VERDICT_RANK[previous]:
        return None, False
    text = f"the {sweep.kind} sweep verdict went from {previous} to {sweep.verdict}"
    severity = sweep.verdict
    if severity == "fail" and not confirmed:
        severity, text = "warn", f"{text} ({UNCONFIRMED})"
    problem = {
        "key": key,
        "kind": "verdict",
        "subject": f"{sweep.kind} sweeps",
        "severity": severity,
        "reason": f"verdict_{previous}_to_{sweep.verdict}",
        "text": text,
        "url": _url("sweep", sweep.pk),
        "data": {"previous_verdict": previous},
    }
    return problem, False


def evaluate_sweep(sweep: Sweep) -> list[int]:
    """Open alerts for new problems and resolve cleared ones; return the deliveries to send."""
    confirmed = {b.finding for b in blame.confirmed_findings(sweep)}
    problems, looked = sweep_problems(sweep, confirmed)
    verdict_problem, verdict_clears = _verdict_change(sweep, confirmed)
    if verdict_problem:
        problems[verdict_problem["key"]] = verdict_problem
    if verdict_clears:
        looked.add(f"verdict:{sweep.kind}")
    silenced = _silenced(problems)
    problems = {key: p for key, p in problems.items() if key not in silenced}
    looked -= silenced  # an acknowledged problem, or one of a node in maintenance, stays as it is
    deliveries: list[int] = []
    newer = newer_coverage(sweep)
    for problem in problems.values():
        if not _superseded(problem, sweep, newer):
            deliveries += _open(problem, sweep)
    cleared = Alert.objects.filter(status="open", key__in=looked - set(problems))
    for alert in cleared:
        if alert.opened_by_id and alert.opened_by_id > sweep.pk:
            continue  # a newer sweep opened it; this older one (evaluated late) has no say
        why = (
            f"sweep #{sweep.pk} is back to {sweep.verdict}"
            if alert.kind == "verdict"
            else f"sweep #{sweep.pk} ({sweep.kind}) found no problem here"
        )
        deliveries += _resolve(alert, sweep, why)
    return deliveries


def _silenced(problems: dict[str, dict]) -> set[str]:
    """Keys of problems no alert is sent for: about a node an operator holds (maintenance, returning), or
    acknowledged while its finding stays the same (cluster_health/operator_states.py)."""
    named = {n for p in problems.values() if p["kind"] != "verdict" for n in p["subject"].split("<->")}
    held = Node.held(named)
    known = Acknowledgement.active_keys((p["subject"], p["reason"]) for p in problems.values())
    return {
        key
        for key, p in problems.items()
        if (p["subject"], p["reason"]) in known
        or p["kind"] != "verdict"
        and any(n in held for n in p["subject"].split("<->"))
    }


def newer_coverage(sweep: Sweep) -> list[tuple[str, set[str]]]:
    """(kind, nodes) of finished sweeps of the same family newer than this one (normally none)."""
    newer = Sweep.objects.filter(status="finished", pk__gt=sweep.pk)
    newer = newer.filter(kind="gpu") if sweep.kind == "gpu" else newer.exclude(kind="gpu")
    return [(kind, set(nodes)) for kind, nodes in newer.values_list("kind", "nodes")]


def _superseded(problem: dict, sweep: Sweep, newer: list[tuple[str, set[str]]]) -> bool:
    """Whether a newer sweep looked at this problem too: its own evaluation decides (tasks can run late)."""
    if problem["kind"] == "verdict":
        return any(kind == sweep.kind for kind, _ in newer)
    subjects = set(problem["subject"].split("<->"))
    return any(subjects <= nodes for _, nodes in newer)


def evaluate_offline(now=None) -> list[int]:
    """Open an alert per agent silent past the threshold; resolve those heard from again."""
    now = now or timezone.now()
    cutoff = now - timedelta(seconds=settings.ALERT_OFFLINE_AFTER_S)
    nodes = Node.objects.all()
    if any(f.name == "active" for f in Node._meta.get_fields()):
        nodes = nodes.filter(active=True, state="service")  # retired nodes, and those in maintenance, may be silent
    deliveries: list[int] = []
    silent = set()
    for node in nodes.filter(last_heartbeat__lt=cutoff):
        silent.add(node.name)
        minutes = (now - node.last_heartbeat).total_seconds() / 60
        deliveries += _open(
            {
                "key": f"offline:{node.name}",
                "kind": "offline",
                "subject": node.name,
                "severity": "fail",
                "reason": "agent_offline",
                "text": f"the agent on {node.name} has sent no heartbeat for {minutes:.0f} minutes",
                "url": _url("node", node.name),
            },
            None,
        )
    for alert in Alert.objects.filter(status="open", kind="offline"):
        node = Node.objects.filter(name=alert.subject).first()
        if node is None or alert.subject not in silent and node.is_online(now):
            deliveries += _resolve(
                alert,
                None,
                f"the agent on {alert.subject} is sending heartbeats again"
                if node
                else f"{alert.subject} is no longer registered",
            )
    return deliveries


def _open(problem: dict, sweep: Sweep | None) -> list[int]:
    later = Alert.objects.filter(key=problem["key"], status="resolved", resolved_by__gt=sweep.pk) if sweep else None
    if later is not None and later.exists():
        return []  # a newer sweep already saw this problem clear
    try:
        with transaction.atomic():
            alert = Alert.objects.create(
                key=problem["key"],
                kind=problem["kind"],
                subject=problem["subject"],
                severity=problem["severity"],
                reason=problem["reason"][:40],
                text=problem["text"],
                url=problem["url"],
                opened_by=sweep,
                data=problem.get("data", {}),
            )
    except IntegrityError:
        return []  # already open: one alert per problem
    log.info("alert opened: %s (%s)", alert.key, alert.reason)
    return _queue(alert, "open")


def _resolve(alert: Alert, sweep: Sweep | None, why: str) -> list[int]:
    if not Alert.objects.filter(pk=alert.pk, status="open").update(
        status="resolved", resolved=timezone.now(), resolved_by=sweep, data={**alert.data, "resolution": why}
    ):
        return []
    alert.refresh_from_db()
    log.info("alert resolved: %s", alert.key)
    return _queue(alert, "resolve")


def _queue(alert: Alert, event: str) -> list[int]:
    rows = [AlertDelivery(alert=alert, channel=ch, event=event) for ch in AlertChannel.objects.filter(enabled=True)]
    return [d.pk for d in AlertDelivery.objects.bulk_create(rows)]


def message(delivery: AlertDelivery) -> dict:
    """The JSON a webhook receives (Slack and e-mail are rendered from it)."""
    alert = delivery.alert
    sweep = alert.resolved_by if delivery.event == "resolve" else alert.opened_by
    if delivery.event == "resolve":
        title = f"[cluster-health] RESOLVED {alert.subject}: {alert.reason}"
        text = f"{alert.subject}: {alert.data.get('resolution', 'cleared')} (was: {alert.text})"
    else:
        title = f"[cluster-health] {alert.severity.upper()} {alert.subject}: {alert.reason}"
        text = alert.text
    return {
        "event": delivery.event,
        "alert": alert.pk,
        "key": alert.key,
        "kind": alert.kind,
        "subject": alert.subject,
        "severity": alert.severity,
        "reason": alert.reason,
        "title": title,
        "text": text,
        "url": alert.url,
        "status": alert.status,
        "sweep": sweep.pk if sweep else None,
        "sweep_kind": sweep.kind if sweep else None,
        "verdict": sweep.verdict if sweep else None,
        "sweep_url": _url("sweep", sweep.pk) if sweep else None,
        "opened": alert.opened.isoformat(),
        "resolved": alert.resolved.isoformat() if alert.resolved else None,
    }
