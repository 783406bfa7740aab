"""What a finished sweep's confirmed evidence blames: the fail findings that may act.

Acting (a Slurm drain, an alert paged at ``fail``) rests on trouble seen twice. On a
network sweep a ``fail`` finding is confirmed where its sweep's confirmation pass saw
that trouble again: a ``confirmed`` pair among the finding's pairs (when it lists them)
of its node, of its link, or of its group. A finding seen once (the pass did not look
again, or was off), or whose pairs came out ``transient`` or ``contended``, is not. On a
gpu sweep the node's own local check decides: every ``fail`` finding is confirmed.
"""

from __future__ import annotations

from dataclasses import dataclass

from cluster_health import vocabulary
from cluster_health.models import PairProbe, Sweep


@dataclass(frozen=True)
class Blame:
    """A confirmed fail finding: its row, code, subject and text, and the nodes it names (none for a group)."""

    finding: int
    code: str
    subject: str
    text: str
    nodes: tuple[str, ...]


def ends(subject: str, names: set[str]) -> tuple[str, ...]:
    """The nodes a finding's subject names: the node itself, or both ends of a link "a<->b"; else none."""
    if subject in names:
        return (subject,)
    both = tuple(subject.split("<->"))
    return both if len(both) == 2 and all(n in names for n in both) else ()


def confirmed_pairs(sweep: Sweep) -> set[tuple[str, str]]:
    """The pairs (sorted names) whose trouble the sweep's confirmation pass saw again."""
    rows = PairProbe.objects.filter(sweep=sweep, evidence__confirmation__outcome="confirmed")
    return {(a, b) if a <= b else (b, a) for a, b in rows.values_list("node_a__name", "node_b__name")}


def confirmed_findings(sweep: Sweep) -> list[Blame]:
    """The sweep's fail findings backed by confirmed evidence, oldest first."""
    names = set(sweep.nodes)
    local = sweep.kind in vocabulary.GPU_SWEEP_KINDS
    seen_again = set() if local else confirmed_pairs(sweep)
    out = []
    rows = sweep.findings.filter(severity="fail").order_by("pk")
    for pk, code, subject, text, listed in rows.values_list("pk", "code", "subject", "text", "pairs"):
        named = ends(subject, names)
        if not local:
            support = {tuple(sorted(name.split("<->"))) for name in listed or ()}
            if len(named) == 2:
                evidence = {tuple(sorted(named))}
            elif named:
                evidence = {k for k in seen_again if named[0] in k}
            else:
                evidence = set(support)  # a group's finding: the pairs it lists
            if support:
                evidence &= support
            if not evidence & seen_again:
                continue
        out.append(Blame(pk, code, subject, text, named))
    return out
