"""The fleet's nodes: how one looks from outside, retiring and activating them, and which group
(rack, leaf switch, rail) each is in.

The grouping (declared, else the operator's hostname pattern, else measured, else the names') is the one that topology sweeps
plan with, the culprit rules name groups by, and the group-level matrix sums up.
``manage.py nodes`` and the API's node endpoints are thin callers of this module.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from cluster_health.core import culprits, topology
from cluster_health.models import AuditEntry, Node, Sweep

# Where nothing is declared: node names -> the groups the latest full sweep measured them in. Registered at
# startup (apps.py: shapes/topology_report.inferred_groups), which reads sweeps' matrices, whose group views
# come back here for their grouping.
MEASURED_GROUPS: list[Callable[[list[str]], dict[str, str]]] = []


def declared_groups(names: Iterable[str]) -> dict[str, str]:
    """Node name -> its declared topology group, for the named nodes that have one."""
    return dict(
        Node.objects.filter(name__in=list(names)).exclude(topology_group="").values_list("name", "topology_group")
    )


# Where a node's group comes from (placed_groups), in the order groups_of asks.
FROM_LABEL, FROM_PATTERN, FROM_MEASURED, FROM_NAME = "declared", "pattern", "measured", "name"
ORIGIN_WORDS = {
    FROM_LABEL: "its declared label",
    FROM_PATTERN: "CLUSTER_HEALTH_GROUP_PATTERN",
    FROM_MEASURED: "the latest full sweep's measurements",  # where no label is declared
    FROM_NAME: "the default hostname pattern",
}


def placed_groups(names: list[str]) -> dict[str, tuple[str, str]]:
    """Each node's group now and where it comes from: declared, else from CLUSTER_HEALTH_GROUP_PATTERN where it is
    set, else the group the latest full sweep's measurements place it in (docs/TOPOLOGY.md), else from the default
    hostname pattern."""
    declared = declared_groups(names)
    measured: dict[str, str] = {}
    if not settings.GROUP_PATTERN and len(declared) < len(names) and MEASURED_GROUPS:
        measured = MEASURED_GROUPS[0]([n for n in names if n not in declared])
    placed = culprits.node_groups(names, settings.GROUP_PATTERN, {**measured, **declared})
    named = FROM_PATTERN if settings.GROUP_PATTERN else FROM_NAME
    return {
        n: (group, FROM_LABEL if n in declared else FROM_MEASURED if n in measured else named)
        for n, (group, _) in placed.items()
    }


def groups_of(names: list[str]) -> dict[str, str]:
    """Each node's group now (placed_groups)."""
    return {n: group for n, (group, _) in placed_groups(names).items()}


def origin_counts(placed: dict[str, tuple[str, str]]) -> dict[str, int]:
    """How many nodes have their group from each origin (FROM_LABEL, ...), in ORIGIN_WORDS' order."""
    counts: dict[str, int] = defaultdict(int)
    for _, origin in placed.values():
        counts[origin] += 1
    return {origin: counts[origin] for origin in ORIGIN_WORDS if counts[origin]}


def origin_words(counts: dict[str, int]) -> str:
    """A sentence for the group view: "Grouped by its declared label (4 nodes) and ..."; "" for no node."""
    parts = [
        f"{ORIGIN_WORDS[o]} ({n} node{'s' if n != 1 else ''})" for o, n in counts.items() if o in ORIGIN_WORDS and n
    ]
    if not parts:
        return ""
    return "Each node grouped by " + (" and ".join(parts) if len(parts) <= 2 else ", ".join(parts)) + "."


def planned_groups(sweep: Sweep) -> dict[str, str]:
    """Node -> group as a topology sweep planned with (declared, or measured where none was: docs/TOPOLOGY.md);
    {} for any other sweep. Its pairs are judged inside these groups, as they were chosen."""
    planned = (sweep.params or {}).get("groups") if sweep.kind == "topology" else None
    if not isinstance(planned, dict):
        return {}
    return {str(node): str(group) for group, nodes in planned.items() for node in nodes}


def judging_groups(sweep: Sweep) -> dict[str, str]:
    """The groups a sweep's pairs are held against their peers in: a topology sweep's planned ones, else the
    declared labels (the hostname pattern fills in: core/culprits.node_groups)."""
    return planned_groups(sweep) or declared_groups(sweep.nodes)


def sweep_grouping(sweep: Sweep, names: list[str]) -> tuple[dict[str, str], str]:
    """The grouping a sweep's views use and where it comes from, in words: a topology sweep's own (the one it
    planned with, its origin kept in its params), else today's."""
    group_of = planned_groups(sweep)
    if not group_of:
        placed = placed_groups(names)
        return {n: group for n, (group, _) in placed.items()}, origin_words(origin_counts(placed))
    missing = [n for n in names if n not in group_of]
    grouping = {**group_of, **groups_of(missing)} if missing else group_of
    kept = (sweep.params or {}).get("groups_from")
    if not isinstance(kept, dict):  # planned before the origin was kept
        return grouping, "Grouped as the sweep planned."
    counts = {str(k): int(v) for k, v in kept.items() if isinstance(v, int) and not isinstance(v, bool)}
    return grouping, origin_words(counts).replace("Each node grouped by", "Grouped as planned, each node by", 1)


def sweep_groups(sweep: Sweep, names: list[str]) -> dict[str, str]:
    """The grouping a sweep's views use (sweep_grouping)."""
    return sweep_grouping(sweep, names)[0]


def node_dict(node: Node, now=None) -> dict:
    """A node as ``manage.py nodes --json`` and the API show it."""
    return {
        "name": node.name,
        "address": node.address,
        "active": node.active,
        "online": node.is_online(now),
        "last_heartbeat": node.last_heartbeat and node.last_heartbeat.isoformat(),
        "retired_at": node.retired_at and node.retired_at.isoformat(),
        "agent_version": node.agent_version or None,
        "busy": node.busy,
        "topology_group": node.topology_group or None,
        "clock_offset_s": node.clock_offset_s,  # its clock minus the server's, from its heartbeats
        # An operator's: service, maintenance, or returning (its verification sweep running).
        "state": node.state,
        "state_reason": node.state_reason or None,
        "state_by": node.state_by or None,
        "state_since": node.state_since and node.state_since.isoformat(),
        "return_sweep": node.return_sweep_id,
        "facts": node.facts,
    }


def registered(names) -> dict[str, Node]:
    """The named nodes by name; Node.DoesNotExist naming the unregistered ones if any name is not registered."""
    nodes = {n.name: n for n in Node.objects.filter(name__in=names)}
    unknown = [n for n in names if n not in nodes]
    if unknown:
        raise Node.DoesNotExist(f"unknown node(s): {', '.join(unknown[:20])}")
    return nodes


@transaction.atomic
def set_active(names: list[str], active: bool, *, actor: str = "", source: str = "page") -> list[Node]:
    """Retire (active=False) or activate the named nodes, each change in the audit log; every name must be
    registered."""
    nodes = registered(names)
    now = timezone.now()
    for node in nodes.values():
        if node.active != active:
            node.activate() if active else node.retire(now)
            AuditEntry.record("activate" if active else "retire", node.name, actor=actor, source=source)
    return [nodes[n] for n in dict.fromkeys(names)]


@transaction.atomic
def set_topology_group(names: list[str], group: str) -> list[Node]:
    """Declare the named nodes' topology group ("" clears it); TopologyError or Node.DoesNotExist change nothing."""
    if group:
        topology.check_group(group)
    nodes = registered(names)
    Node.objects.filter(name__in=names).update(topology_group=group)
    for node in nodes.values():
        node.topology_group = group
    return [nodes[n] for n in dict.fromkeys(names)]


@transaction.atomic
def declare_topology(groups: dict[str, str]) -> int:
    """Make the declared topology exactly ``groups`` (node -> group): the nodes it leaves out lose theirs.

    Every node must be registered (else Node.DoesNotExist, and nothing changes). Returns
    how many nodes not in ``groups`` had their group cleared.
    """
    registered(list(groups))
    members: dict[str, list[str]] = defaultdict(list)
    for name, group in groups.items():
        members[topology.check_group(group)].append(name)
    for group, names in members.items():
        Node.objects.filter(name__in=names).update(topology_group=group)
    return Node.objects.exclude(name__in=list(groups)).exclude(topology_group="").update(topology_group="")
