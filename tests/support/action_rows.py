"""Finished sweeps written straight into the database, for the alert and Slurm rule tests."""

from __future__ import annotations

from django.utils import timezone

from cluster_health.models import Finding, Node, PairProbe, Sweep

ONE_ROUND_RUN = {"status": "finished", "total_rounds": 1, "current_round": 1}  # a sweep that ran to its end


def finished_sweep(
    nodes: list[str],
    bad: dict[tuple[str, str], str] | None = None,
    findings=(),
    kind: str = "connectivity",
    verdict: str | None = None,
    outcomes: dict[tuple[str, str], str] | None = None,
) -> Sweep:
    """A finished sweep over every pair of ``nodes``; ``bad`` maps a pair to its status; findings as tuples
    (severity, code, subject, text[, pairs]); ``outcomes`` maps a pair to what its confirmation pass decided."""
    bad, outcomes = bad or {}, outcomes or {}
    now = timezone.now()
    for n in nodes:
        Node.objects.get_or_create(name=n, defaults={"address": "127.0.0.1", "last_heartbeat": now})
    if verdict is None:
        verdict = "fail" if any(f[0] == "fail" for f in findings) or bad else "pass"
    sweep = Sweep.objects.create(kind=kind, nodes=nodes, verdict=verdict, started=now, finished=now, **ONE_ROUND_RUN)
    ids = dict(Node.objects.filter(name__in=nodes).values_list("name", "pk"))
    for i, a in enumerate(nodes):
        for b in nodes[i + 1 :]:
            outcome = outcomes.get((a, b))
            PairProbe.objects.create(
                sweep=sweep,
                round=1,
                node_a_id=ids[a],
                node_b_id=ids[b],
                status=bad.get((a, b), "ok"),
                finished=now,
                evidence={"confirmation": {"outcome": outcome}} if outcome else None,
            )
    for severity, code, subject, text, *listed in findings:
        Finding.objects.create(
            sweep=sweep, severity=severity, code=code, subject=subject, text=text, pairs=listed[0] if listed else []
        )
    return sweep
