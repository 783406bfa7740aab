"""Which group (rack, leaf switch, rail) each node is in: its declared group, else the hostname pattern's.

One place for the grouping that topology sweeps plan with, the culprit rules name
groups by, and the group-level matrix sums up.
"""

from __future__ import annotations

from collections.abc import Iterable

from django.conf import settings

from cluster_health.core import culprits
from cluster_health.models import Node, Sweep


def declared(names: Iterable[str]) -> dict[str, str]:
    """Node name -> its declared topology group, for the named nodes that have one."""
    return dict(
        Node.objects.filter(name__in=list(names)).exclude(topology_group="").values_list("name", "topology_group")
    )


def groups_of(names: list[str]) -> dict[str, str]:
    """Each node's group now: declared, else from CLUSTER_HEALTH_GROUP_PATTERN."""
    placed = culprits.node_groups(names, settings.GROUP_PATTERN, declared(names))
    return {n: group for n, (group, _) in placed.items()}


def sweep_groups(sweep: Sweep, names: list[str]) -> dict[str, str]:
    """The grouping a sweep's views use: a topology sweep's own (the one it planned with), else today's."""
    planned = (sweep.params or {}).get("groups") if sweep.kind == "topology" else None
    if isinstance(planned, dict):
        group_of = {node: str(group) for group, nodes in planned.items() for node in nodes}
        missing = [n for n in names if n not in group_of]
        return {**group_of, **groups_of(missing)} if missing else group_of
    return groups_of(names)
