"""List registered nodes (online state, address, last heartbeat, versions, or all as JSON); retire or activate
them; declare their topology groups.

The fleet is the active nodes: a sweep without --nodes covers every one of them,
and one that is offline fails the sweep. ``nodes retire NAME`` takes a node that is
gone out of the fleet; ``nodes activate NAME`` puts it back.

A node's topology group (rack, leaf switch, rail) is what culprit inference groups it
by, before its name: ``nodes label GROUP NAME ...`` sets it, ``nodes unlabel NAME ...``
clears it, ``nodes topology FILE`` makes the whole declared topology that of a file
(format: cluster_health.core.topology). Each changes nothing unless every name is registered.
"""

from __future__ import annotations

import getpass
import json

from django.core.management.base import BaseCommand, CommandError
from django.utils import timezone

from cluster_health import operator_states
from cluster_health.core import topology
from cluster_health.models import Node
from cluster_health.nodes import declare_topology, node_dict, registered, set_active, set_topology_group

USAGE = {
    "retire": "nodes retire NAME [NAME ...]",
    "activate": "nodes activate NAME [NAME ...]",
    "label": "nodes label GROUP NAME [NAME ...]",
    "unlabel": "nodes unlabel NAME [NAME ...]",
    "topology": "nodes topology FILE (lines 'GROUP: NAME NAME ...')",
    "maintenance": "nodes maintenance NAME --reason TEXT | nodes maintenance NAME --off",
}


class Command(BaseCommand):
    help = (
        "List registered nodes and whether they are online; 'retire NAME ...' / 'activate NAME ...' edit the fleet; "
        "'label GROUP NAME ...', 'unlabel NAME ...' and 'topology FILE' declare their topology groups."
    )

    def add_arguments(self, parser):
        parser.add_argument(
            "action",
            nargs="?",
            choices=("list", "retire", "activate", "label", "unlabel", "topology", "maintenance"),
            default="list",
            help="retire: leave sweeps out of the node until it is activated again; label GROUP NAME ...: declare "
            "the nodes' topology group (rack, leaf, rail); unlabel: back to the group their name gives; "
            "topology FILE: declare every node's group from FILE ('GROUP: NAME NAME ...' lines), clearing the rest",
        )
        parser.add_argument("names", nargs="*", metavar="NAME")
        parser.add_argument("--json", action="store_true")
        parser.add_argument("--reason", help="maintenance NAME --reason TEXT: why it is out of sweeps, alerts, drains")
        parser.add_argument(
            "--off",
            action="store_true",
            help="maintenance NAME --off: return it to service once a verification sweep with healthy partners "
            "passes it (its Slurm drains by cluster-health resumed then)",
        )

    def handle(self, *args, **opts):
        action, names = opts["action"], opts["names"]
        if action == "list":
            if names:
                raise CommandError("nodes: names go with an action (retire, activate, label, unlabel, topology)")
            self._list(opts["json"])
            return
        if len(names) < (2 if action == "label" else 1) or (action in ("topology", "maintenance") and len(names) != 1):
            raise CommandError(f"usage: {USAGE[action]}")
        if action == "maintenance":
            self._maintenance(names[0], opts)
            return
        try:
            changed = self._change(action, names)
        except (Node.DoesNotExist, topology.TopologyError) as exc:
            raise CommandError(f"nodes {action}: {exc}; nothing changed") from None
        if opts["json"]:
            now = timezone.now()
            self.stdout.write(json.dumps({"nodes": [node_dict(n, now) for n in changed]}))
            return
        for n in changed:
            if action in ("retire", "activate"):
                self.stdout.write(f"{n.name}: {'active' if n.active else 'retired'}")
            else:
                self.stdout.write(f"{n.name}: {n.topology_group or 'no declared group'}")

    def _maintenance(self, name: str, opts) -> None:
        actor = getpass.getuser()
        if opts["off"] == bool(opts["reason"]):
            raise CommandError(f"usage: {USAGE['maintenance']}")
        try:
            if opts["off"]:
                sweep = operator_states.return_to_service(name, actor=actor, source="command")
                node = Node.objects.get(name=name)
                line = f"{name}: returning to service once verification sweep {sweep.pk} passes it"
            else:
                node = operator_states.set_maintenance(name, opts["reason"], actor=actor, source="command")
                line = f"{name}: maintenance ({node.state_reason})"
        except (Node.DoesNotExist, operator_states.OperatorError) as exc:
            raise CommandError(f"nodes maintenance: {exc}; nothing changed") from None
        self.stdout.write(json.dumps({"nodes": [node_dict(node)]}) if opts["json"] else line)

    def _change(self, action: str, names: list[str]) -> list[Node]:
        if action in ("retire", "activate"):
            return set_active(names, action == "activate", actor=getpass.getuser(), source="command")
        if action == "label":
            return set_topology_group(names[1:], names[0])
        if action == "unlabel":
            return set_topology_group(names, "")
        try:
            with open(names[0], encoding="utf-8") as f:
                groups = topology.parse(f.read())
        except (OSError, UnicodeDecodeError) as exc:
            raise CommandError(f"nodes topology: cannot read {names[0]}: {exc}") from None
        except topology.TopologyError as exc:
            raise topology.TopologyError(f"{names[0]}: {exc}") from None
        cleared = declare_topology(groups)
        self.stderr.write(
            f"declared {len(groups)} node(s) in {len(set(groups.values()))} group(s); "
            f"cleared the group of {cleared} node(s) the file does not list"
        )
        return sorted(registered(list(groups)).values(), key=lambda n: n.name)

    def _list(self, as_json: bool) -> None:
        now = timezone.now()
        nodes = list(Node.objects.order_by("name"))
        if as_json:
            self.stdout.write(json.dumps({"nodes": [node_dict(n, now) for n in nodes]}))
            return
        if not nodes:
            self.stdout.write("no nodes registered (start an agent: python -m agents run --name NAME)")
            return
        width = max(len(n.name) for n in nodes)
        # The fleet's offline nodes first: they fail every sweep until started or retired.
        for n in sorted(nodes, key=lambda n: (not n.active, n.is_online(now), n.name)):
            seen = f"{(now - n.last_heartbeat).total_seconds():.0f}s ago" if n.last_heartbeat else "never"
            versions = (n.facts or {}).get("versions") or {}
            torch = versions.get("torch") or "?"
            state = "retired" if not n.active else ("online " if n.is_online(now) else "OFFLINE")
            if n.active and not n.in_service:
                state += f" {n.state}"
            line = f"{n.name:<{width}}  {state}  {n.address:<16} heartbeat {seen:<10} torch {torch}"
            if n.topology_group:
                line += f"  group {n.topology_group}"
            if n.is_stale(now):
                line += f"  silent for {n.silent_days(now)} days: retire it if it is gone"
            self.stdout.write(line)
