"""Rows for the dashboard tests: users with and without the operator permission, nodes, sweeps."""

from __future__ import annotations

from datetime import timedelta

from django.contrib.auth.models import User
from django.utils import timezone

from cluster_health import defaults
from cluster_health.core import matrix
from cluster_health.models import Finding, Node, PairProbe, Sweep

PASSWORD = "correct horse battery staple"


def make_user(username: str, operator: bool) -> User:
    user = User.objects.create_user(username, password=PASSWORD)
    if operator:
        user.groups.add(defaults.ensure_operators_group())
    return user


def make_nodes(names, online=True, facts=None) -> list[Node]:
    seen = timezone.now() if online else timezone.now() - timedelta(hours=1)
    return [
        Node.objects.create(
            name=n, address=f"10.0.0.{i + 1}", last_heartbeat=seen, facts=(facts or {}).get(n, {}), agent_version="1"
        )
        for i, n in enumerate(names)
    ]


def make_sweep(
    nodes: list[Node], results: dict | None = None, status="finished", verdict="pass", findings=(), **kw
) -> Sweep:
    """A sweep over `nodes` with one probe per pair; `results[(a, b)]` overrides a pair's fields."""
    now = timezone.now()
    sweep = Sweep.objects.create(
        nodes=[n.name for n in nodes],
        status=status,
        verdict=verdict,
        started=now - timedelta(seconds=30),
        finished=None if status in Sweep.OPEN_STATUSES else now,
        total_rounds=max(1, len(nodes) - 1),
        current_round=1,
        **kw,
    )
    results = results or {}
    for i, a in enumerate(nodes):
        for b in nodes[i + 1 :]:
            fields = {"status": "ok", "stage": "bandwidth", "busbw_gbps": 2.0, "latency_us_p50": 150.0}
            fields.update(results.get((a.name, b.name), {}))
            PairProbe.objects.create(sweep=sweep, round=1, node_a=a, node_b=b, **fields)
    for severity, subject, text in findings:
        Finding.objects.create(sweep=sweep, severity=severity, code="test", subject=subject, text=text)
    return sweep


def matrix_payload(nodes, pairs) -> dict:
    """The matrix payload of pairs given as the sweep JSON shapes them (a, b, status, busbw_gbps, latency_us, ...)."""
    rows = (
        (
            p["a"],
            p["b"],
            p["status"],
            p.get("busbw_gbps"),
            p.get("latency_us"),
            p.get("stage"),
            p.get("reason"),
            p.get("hint"),
        )
        for p in pairs
    )
    return matrix.build_matrix_arrays(nodes, rows).payload()
