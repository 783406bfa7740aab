"""Template tags for what operators set and what coverage says, so any page can show them without its view
reading them: a node's state and its maintenance form, a finding's acknowledgement, the coverage panel."""

from __future__ import annotations

import hashlib

from django import template
from django.core.cache import cache
from django.utils.dateparse import parse_datetime

from cluster_health import coverage
from cluster_health.models import IN_SERVICE, Acknowledgement, AuditEntry, Node

register = template.Library()
COVERAGE_CACHE_S = 60  # every viewer of the overview reuses one summary a minute
COVERAGE_PANEL_PAIRS = 5


@register.simple_tag
def held_nodes() -> dict[str, Node]:
    """Name -> node, for the nodes an operator holds (maintenance, returning): one query for a whole table."""
    return {n.name: n for n in Node.objects.exclude(state=IN_SERVICE)}


@register.inclusion_tag("cluster_health/_node_operator.html", takes_context=True)
def node_operator_panel(context, node: Node) -> dict:
    return {
        "node": node,
        "perms": context.get("perms"),
        "csrf_token": context.get("csrf_token"),
        "entries": AuditEntry.objects.filter(subject=node.name)[:5],
    }


@register.inclusion_tag("cluster_health/_acknowledge.html", takes_context=True)
def acknowledge_panel(context, finding) -> dict:
    ack = Acknowledgement.objects.filter(subject=finding.subject, code=finding.code).order_by("-created").first()
    return {"finding": finding, "ack": ack, "perms": context.get("perms"), "csrf_token": context.get("csrf_token")}


@register.inclusion_tag("cluster_health/_coverage_panel.html")
def coverage_panel() -> dict:
    """The coverage summary, one a minute for every viewer of the same fleet: keyed by the nodes in service
    (one query), so a node put in maintenance, returned, retired or added changes the panel at once."""
    names = coverage.fleet()
    key = f"cluster-health:coverage-summary:{hashlib.sha256(chr(10).join(names).encode()).hexdigest()[:24]}"
    summary = cache.get_or_set(key, lambda: coverage.summary(names=names), COVERAGE_CACHE_S)
    # The summary is the API's (ISO text); the page writes each time in the one format, with its zone.
    stalest = [
        {**p, "at": p["last_measured"] and parse_datetime(p["last_measured"])}
        for p in summary["stalest"][:COVERAGE_PANEL_PAIRS]
    ]
    return {"c": summary, "stalest": stalest}


@register.filter
def get_item(mapping, key):
    """``mapping[key]``, or None: a dict read by a variable key in a template."""
    return mapping.get(key) if hasattr(mapping, "get") else None
