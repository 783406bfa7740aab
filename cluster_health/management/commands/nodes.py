"""List registered nodes: online state, address, last heartbeat, versions (or the whole facts as JSON)."""

from __future__ import annotations

import json

from django.core.management.base import BaseCommand
from django.utils import timezone

from cluster_health.models import Node


def node_dict(node: Node, now=None) -> dict:
    return {"name": node.name, "address": node.address, "online": node.is_online(now),
            "last_heartbeat": node.last_heartbeat and node.last_heartbeat.isoformat(),
            "agent_version": node.agent_version or None, "busy": node.busy, "facts": node.facts}


class Command(BaseCommand):
    help = "List registered nodes and whether they are online."

    def add_arguments(self, parser):
        parser.add_argument("--json", action="store_true")

    def handle(self, *args, **opts):
        now = timezone.now()
        nodes = list(Node.objects.order_by("name"))
        if opts["json"]:
            self.stdout.write(json.dumps({"nodes": [node_dict(n, now) for n in nodes]}))
            return
        if not nodes:
            self.stdout.write("no nodes registered (start an agent: python -m agents run --name NAME)")
            return
        width = max(len(n.name) for n in nodes)
        for n in nodes:
            seen = f"{(now - n.last_heartbeat).total_seconds():.0f}s ago" if n.last_heartbeat else "never"
            versions = (n.facts or {}).get("versions") or {}
            torch = versions.get("torch") or "?"
            self.stdout.write(f"{n.name:<{width}}  {'online ' if n.is_online(now) else 'OFFLINE'}  "
                              f"{n.address:<16} heartbeat {seen:<10} torch {torch}")
