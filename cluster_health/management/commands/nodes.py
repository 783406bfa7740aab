"""List registered nodes (online state, address, last heartbeat, versions, or all as JSON); retire or activate them.

The fleet is the active nodes: a sweep without --nodes covers every one of them,
and one that is offline fails the sweep. ``nodes retire NAME`` takes a node that is
gone out of the fleet; ``nodes activate NAME`` puts it back.
"""

from __future__ import annotations

import json

from django.core.management.base import BaseCommand, CommandError
from django.utils import timezone

from cluster_health.models import Node


def node_dict(node: Node, now=None) -> dict:
    return {
        "name": node.name,
        "address": node.address,
        "active": node.active,
        "online": node.is_online(now),
        "last_heartbeat": node.last_heartbeat and node.last_heartbeat.isoformat(),
        "retired_at": node.retired_at and node.retired_at.isoformat(),
        "agent_version": node.agent_version or None,
        "busy": node.busy,
        "facts": node.facts,
    }


def set_active(names: list[str], active: bool) -> list[Node]:
    """Retire (active=False) or activate the named nodes; every name must be registered."""
    nodes = {n.name: n for n in Node.objects.filter(name__in=names)}
    unknown = [n for n in names if n not in nodes]
    if unknown:
        raise Node.DoesNotExist(f"unknown node(s): {', '.join(unknown[:20])}")
    now = timezone.now()
    for node in nodes.values():
        if node.active != active:
            node.activate() if active else node.retire(now)
    return [nodes[n] for n in dict.fromkeys(names)]


class Command(BaseCommand):
    help = "List registered nodes and whether they are online; 'retire NAME ...' / 'activate NAME ...' edit the fleet."

    def add_arguments(self, parser):
        parser.add_argument(
            "action",
            nargs="?",
            choices=("list", "retire", "activate"),
            default="list",
            help="retire: leave sweeps out of the node until it is activated again",
        )
        parser.add_argument("names", nargs="*", metavar="NAME")
        parser.add_argument("--json", action="store_true")

    def handle(self, *args, **opts):
        now = timezone.now()
        if opts["action"] != "list":
            if not opts["names"]:
                raise CommandError(f"nodes {opts['action']}: name at least one node")
            try:
                changed = set_active(opts["names"], opts["action"] == "activate")
            except Node.DoesNotExist as exc:
                raise CommandError(str(exc)) from None
            if opts["json"]:
                self.stdout.write(json.dumps({"nodes": [node_dict(n, now) for n in changed]}))
            else:
                for n in changed:
                    self.stdout.write(f"{n.name}: {'active' if n.active else 'retired'}")
            return
        if opts["names"]:
            raise CommandError("nodes: names go with retire or activate")
        nodes = list(Node.objects.order_by("name"))
        if opts["json"]:
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
            line = f"{n.name:<{width}}  {state}  {n.address:<16} heartbeat {seen:<10} torch {torch}"
            if n.is_stale(now):
                line += f"  silent for {n.silent_days(now)} days: retire it if it is gone"
            self.stdout.write(line)
