"""Slurm: drain the nodes a sweep blames, resume the ones cluster-health drained once they pass.

Only ``scontrol`` is run, always as an argv list (no shell), with the cluster's own
Slurm configuration (``SLURM_CONF`` in the worker's environment). A node is resumed
only if cluster-health recorded draining it and its current reason still starts with
our prefix: a node someone else drained, or re-drained, is never touched.
"""

from __future__ import annotations

import logging
import re
import subprocess
from dataclasses import dataclass

from django.conf import settings
from django.utils import timezone

from cluster_health import vocabulary
from cluster_health.actions import blame
from cluster_health.actions.alerts import newer_coverage
from cluster_health.actions.models import SlurmDrain
from cluster_health.models import Node, PairProbe, Sweep

log = logging.getLogger(__name__)
REASON_PREFIX = "cluster-health sweep #"
MAX_REASON = 200  # characters: Slurm keeps the reason in its state files and prints it in sinfo
OK_STATUSES = ("ok", "degraded", *vocabulary.CONFIRMATION_STATUSES)  # worked: never a reason to drain
_SLURM_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,199}$")


class SlurmError(Exception):
    """scontrol failed or is missing; the task retries."""


class NodeMapError(ValueError):
    """CLUSTER_HEALTH_SLURM_NODE_MAP cannot be parsed."""


def parse_node_map(rule: str):
    """A function from cluster-health node names to Slurm node names, from the configured rule.

    ``""``: the same name. ``s/REGEX/REPLACEMENT/``: a regex substitution (the first
    match). ``a=b,c=d``: an explicit list; names not listed keep their own.
    """
    rule = rule.strip()
    if not rule:
        return lambda name: name
    if rule.startswith("s") and len(rule) > 2 and not rule[1].isalnum():
        sep = rule[1]
        parts = rule[2:].split(sep)
        if len(parts) != 3 or parts[2] != "":
            raise NodeMapError(f"CLUSTER_HEALTH_SLURM_NODE_MAP: expected s{sep}REGEX{sep}REPLACEMENT{sep}")
        try:
            pattern = re.compile(parts[0])
        except re.error as exc:
            raise NodeMapError(f"CLUSTER_HEALTH_SLURM_NODE_MAP: bad regex: {exc}") from None
        return lambda name: pattern.sub(parts[1], name, count=1)
    table = {}
    for item in rule.split(","):
        a, sep, b = item.partition("=")
        if not sep or not a.strip() or not b.strip():
            raise NodeMapError(f"CLUSTER_HEALTH_SLURM_NODE_MAP: {item!r} is not name=slurm_name")
        table[a.strip()] = b.strip()
    return lambda name: table.get(name, name)


def slurm_name(name: str, rule: str | None = None) -> str:
    """The Slurm name of a node, checked to be a plain host name (it goes into an scontrol argument)."""
    mapped = parse_node_map(settings.SLURM_NODE_MAP if rule is None else rule)(name)
    if not _SLURM_NAME.match(mapped):
        raise NodeMapError(f"{name} maps to {mapped!r}, which is not a valid Slurm node name")
    return mapped


@dataclass
class NodeState:
    state: str  # scontrol's State, for example IDLE+DRAIN
    reason: str  # without the " [user@time]" Slurm appends

    @property
    def drained(self) -> bool:
        return "DRAIN" in self.state.split("+") or self.state.startswith("DRAIN")

    @property
    def ours(self) -> bool:
        return self.reason.startswith(REASON_PREFIX)


def _scontrol(*args: str) -> str:
    argv = [settings.SLURM_SCONTROL, *args]
    try:
        run = subprocess.run(argv, capture_output=True, text=True, timeout=settings.SLURM_TIMEOUT_S, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise SlurmError(f"scontrol {args[0]}: {exc}") from None
    if run.returncode != 0:
        raise SlurmError(f"scontrol {' '.join(args[:2])}: exit {run.returncode}: {run.stderr.strip()[:300]}")
    return run.stdout


def node_state(slurm_node: str) -> NodeState:
    """The node's state and reason as slurmctld has them now."""
    out = _scontrol("show", "node", "--oneliner", slurm_node)
    state = re.search(r"\bState=(\S+)", out)
    reason = re.search(r"\bReason=(.*?)(?: \[[^\]]*@[^\]]*\])?\s*$", out.strip())
    return NodeState(state.group(1) if state else "", reason.group(1).strip() if reason else "")


def _resume(slurm_node: str) -> None:
    try:
        _scontrol("update", f"NodeName={slurm_node}", "State=RESUME")
    except SlurmError:
        # slurmctld clears the drain of a node whose slurmd never registered (state UNKNOWN)
        # and still answers "Invalid node state specified": the state read back decides.
        if node_state(slurm_node).drained:
            raise


_JOB_ID = re.compile(r"^[0-9]{1,12}(_[0-9]{1,8})?$")


def job_nodes(job_id: str, states: tuple[str, ...] = ("RUNNING",)) -> list[str]:
    """The Slurm nodes a job in one of ``states`` holds, as slurmctld says; SlurmError naming its state otherwise.

    A job whose PrologSlurmctld runs is CONFIGURING: its nodes are allocated, nothing runs yet.
    """
    if not _JOB_ID.match(job_id):
        raise SlurmError(f"{job_id!r} is not a Slurm job id")
    try:
        out = _scontrol("show", "job", "--oneliner", job_id)
    except SlurmError as exc:
        raise SlurmError(f"slurmctld knows no job {job_id} ({exc})") from None
    state = re.search(r"\bJobState=(\S+)", out)
    nodes = re.search(r"\bNodeList=(\S+)", out)
    if not state or state.group(1) not in states or not nodes or nodes.group(1) == "(null)":
        why = re.search(r"\bReason=(\S+)", out)
        raise SlurmError(
            f"job {job_id} is {state.group(1) if state else 'unknown'}"
            f"{f' ({why.group(1)})' if why and why.group(1) != 'None' else ''}: it runs on no node now"
        )
    return [n for n in _scontrol("show", "hostnames", nodes.group(1)).split() if _SLURM_NAME.match(n)]


def node_states() -> dict[str, str]:
    """Each Slurm node's State (``IDLE``, ``ALLOCATED``, ``IDLE+MAINTENANCE+RESERVED`` ...), as slurmctld says."""
    out = _scontrol("show", "nodes", "--oneliner")
    states = {}
    for line in out.splitlines():
        name, state = re.search(r"\bNodeName=(\S+)", line), re.search(r"\bState=(\S+)", line)
        if name and state and _SLURM_NAME.match(name.group(1)):
            states[name.group(1)] = state.group(1)
    return states


def runs_nothing(state: str) -> bool:
    """A node that runs no job, finishes none and is not drained or down: ``IDLE``, or ``IDLE`` held by a
    MAINT reservation (``IDLE+MAINTENANCE+RESERVED``)."""
    base, *flags = state.split("+")
    return base == "IDLE" and set(flags) <= {"MAINTENANCE", "MAINT", "RESERVED"}


def running_job(state: str) -> bool:
    """A node a job runs on (ALLOCATED or MIXED, whatever else it is)."""
    return state.split("+")[0] in ("ALLOCATED", "MIXED")


HOLD_PREFIX = "cluster-health-idle-"
CATCH_PREFIX = "cluster-health-catch-"
_HOLD_NAME = re.compile(r"^cluster-health-(idle|catch)-[a-z0-9]{1,32}$")


def hold(reservation: str, slurm_nodes: list[str], minutes: int, user: str, catch: bool = False) -> None:
    """Keep new jobs off idle nodes for ``minutes``: a MAINT reservation that slurmctld refuses if a job runs on
    any of them, and that ends by itself when its time is up (a server killed mid-sweep holds nothing for long).

    ``catch``: a busy node instead (one, named ``CATCH_PREFIX...``): ``IGNORE_JOBS`` lets slurmctld make it
    over the running job, which goes on untouched; once that job ends no other starts there until the
    reservation ends, so the node waits, idle, for the next idle sweep."""
    if not _HOLD_NAME.match(reservation) or not all(_SLURM_NAME.match(n) for n in slurm_nodes):
        raise SlurmError(f"not a hold cluster-health makes: {reservation} on {slurm_nodes}")
    if catch != reservation.startswith(CATCH_PREFIX) or (catch and len(slurm_nodes) != 1):
        raise SlurmError(f"a catch is one node under a {CATCH_PREFIX}... name: {reservation} on {slurm_nodes}")
    _scontrol(
        "create",
        "reservation",
        f"ReservationName={reservation}",
        "StartTime=now",
        f"Duration={max(1, int(minutes))}",
        f"Nodes={','.join(slurm_nodes)}",
        f"Users={user}",
        "Flags=MAINT,IGNORE_JOBS" if catch else "Flags=MAINT",
    )


def reservations() -> dict[str, list[str]]:
    """Every reservation slurmctld has active now (an admin's, an idle sweep's hold, a catch): name -> its nodes.
    slurmctld marks a reserved node's State (``+MAINTENANCE+RESERVED``) only some time after the reservation is
    made, so what is reserved is read from the reservations themselves."""
    out = _scontrol("show", "reservation", "--oneliner")
    found = {}
    for line in out.splitlines():
        name, nodes = re.search(r"\bReservationName=(\S+)", line), re.search(r"\bNodes=(\S+)", line)
        if name and nodes and "State=ACTIVE" in line and nodes.group(1) != "(null)":
            expanded = _scontrol("show", "hostnames", nodes.group(1)).split()
            found[name.group(1)] = [n for n in expanded if _SLURM_NAME.match(n)]
    return found


def catches(active: dict[str, list[str]] | None = None) -> dict[str, str]:
    """Our catches among the ``active`` reservations (read when not given): reservation name -> its one node."""
    active = reservations() if active is None else active
    return {
        name: nodes[0]
        for name, nodes in active.items()
        if name.startswith(CATCH_PREFIX) and _HOLD_NAME.match(name) and len(nodes) == 1
    }


def release(reservation: str) -> bool:
    """End a hold or a catch; False if slurmctld has none by that name (ended by its time, or released already)."""
    if not _HOLD_NAME.match(reservation):
        raise SlurmError(f"not a hold cluster-health makes: {reservation}")
    try:
        _scontrol("delete", f"ReservationName={reservation}")
    except SlurmError:
        if reservation in _scontrol("show", "reservation", "--oneliner"):
            raise
        return False
    return True


def ours_by_slurm_name(names) -> dict[str, str]:
    """Slurm node name -> cluster-health node name, for the given cluster-health names that map cleanly."""
    out = {}
    for name in names:
        try:
            out[slurm_name(name)] = name
        except NodeMapError:
            continue
    return out


def drain_reason(sweep: Sweep, text: str) -> str:
    """Reason= for a drain: our prefix, the sweep, then the finding (quotes and newlines dropped)."""
    clean = re.sub(r"[\"'\n\r\t]+", " ", text).strip()
    return f"{REASON_PREFIX}{sweep.pk}: {clean}"[:MAX_REASON]


NEVER_DRAINS = ("node_offline",)  # not hearing a node is the server's trouble: a warning to people, never a drain


def blamed_nodes(sweep: Sweep) -> dict[str, str]:
    """Nodes this sweep's confirmed evidence blames -> the fail finding's text (the drain's reason).

    The confirmed fail findings (cluster_health/actions/blame.py): a node one names, or both
    ends of a link. ``node_offline`` (not hearing a node) and a group's finding (a segment
    between racks names a switch path) drain nothing.
    """
    out: dict[str, str] = {}
    for found in blame.confirmed_findings(sweep):
        if found.code in NEVER_DRAINS:
            continue
        for node in found.nodes:
            out.setdefault(node, found.text)
    return out


def passing_nodes(sweep: Sweep) -> set[str]:
    """Nodes this sweep passed: every measured pair ok or degraded (gpu sweeps: no finding names them)."""
    if sweep.kind == "gpu":
        named = set(sweep.findings.filter(severity__in=("warn", "fail")).values_list("subject", flat=True))
        return set(sweep.nodes) - named
    seen: dict[str, bool] = {}
    for a, b, status in (
        PairProbe.objects.filter(sweep=sweep)
        .exclude(status="skipped")
        .values_list("node_a__name", "node_b__name", "status")
    ):
        for n in (a, b):
            seen[n] = seen.get(n, True) and status in OK_STATUSES
    blamed = set(blamed_nodes(sweep))
    return {n for n, ok in seen.items() if ok and n not in blamed}


def act_on_sweep(sweep: Sweep, mode: str | None = None) -> list[str]:
    """Drain blamed nodes and resume recovered ones as the mode says; return what was done (or would be)."""
    mode = mode or settings.SLURM_ACTIONS
    if mode == "off":
        return []
    done: list[str] = []
    newer = newer_coverage(sweep)
    held = Node.held(sweep.nodes)
    for node, text in blamed_nodes(sweep).items():
        target = slurm_name(node)
        if node in held:
            done.append(f"left {target}: {held[node]} (an operator's)")
            continue
        if any(node in nodes for _, nodes in newer):
            # A newer sweep of this node has finished: its own actions decide (a late or replayed task
            # for an old sweep must never drain a node that has passed since).
            done.append(f"left {target}: sweep #{sweep.pk} is not this node's newest")
            continue
        if SlurmDrain.objects.filter(slurm_node=target, status="drained").exists():
            continue  # drained by an earlier sweep; stays drained until it passes
        reason = drain_reason(sweep, text)
        current = node_state(target)
        if current.drained and not current.ours:
            log.info("slurm: %s is already drained by someone else (%s); leaving it", target, current.reason)
            done.append(f"left {target}: drained by someone else")
            continue
        if mode == "report":
            log.warning("slurm (report only): would drain %s: %s", target, reason)
            done.append(f"would drain {target}")
            continue
        _scontrol("update", f"NodeName={target}", "State=DRAIN", f"Reason={reason}")
        SlurmDrain.objects.create(node=node, slurm_node=target, sweep=sweep, reason=reason)
        log.warning("slurm: drained %s: %s", target, reason)
        done.append(f"drained {target}")
    passed = passing_nodes(sweep) - set(held)  # a held node is resumed by its return to service alone
    for drain in SlurmDrain.objects.filter(status="drained", node__in=passed).select_related("sweep"):
        if drain.sweep_id and drain.sweep_id > sweep.pk:
            continue  # drained by a newer sweep than this one
        if any(drain.node in nodes for _, nodes in newer):
            # As for a drain: a newer finished sweep of this node decides (it may have blamed it again).
            done.append(f"left {drain.slurm_node}: sweep #{sweep.pk} is not this node's newest")
            continue
        if drain.sweep and (drain.sweep.kind == "gpu") != (sweep.kind == "gpu"):
            continue  # a GPU problem is cleared by a GPU check, a network one by a network sweep
        done.append(_resume_drain(drain, sweep, mode))
    return done


def _resume_drain(drain: SlurmDrain, sweep: Sweep, mode: str) -> str:
    """Resume one of our drains that ``sweep`` passed, unless it was changed outside cluster-health."""
    current = node_state(drain.slurm_node)
    if not (current.drained and current.ours):
        # Resumed by hand, or re-drained by someone with their own reason: theirs now.
        SlurmDrain.objects.filter(pk=drain.pk, status="drained").update(status="released", ended=timezone.now())
        return f"released {drain.slurm_node}: changed outside cluster-health"
    if mode == "report":
        log.warning("slurm (report only): would resume %s", drain.slurm_node)
        return f"would resume {drain.slurm_node}"
    _resume(drain.slurm_node)
    SlurmDrain.objects.filter(pk=drain.pk, status="drained").update(
        status="resumed", resumed_by=sweep, ended=timezone.now()
    )
    log.warning("slurm: resumed %s (sweep #%s passed it)", drain.slurm_node, sweep.pk)
    return f"resumed {drain.slurm_node}"


def resume_node(node: str, sweep: Sweep, mode: str | None = None) -> list[str]:
    """Resume cluster-health's drains of a node its verification sweep passed (a return to service)."""
    mode = mode or settings.SLURM_ACTIONS
    if mode == "off":
        return []
    return [_resume_drain(d, sweep, mode) for d in SlurmDrain.objects.filter(status="drained", node=node)]
