"""A finding's evidence chain in words, and the probes it rests on, for its "why" page.

Rules keep their chain as they found it (``detail.evidence``): sentences, figures, and for the
confirmation pass one record per pair (core/confirmation.py: ``outcome``, the ``first`` and the
``again`` probe, each side's ``partners``, the ``culprit``). A page shows each as a sentence, never
as the Python dict it is stored as.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from django.db.models import Q

from cluster_health.models import Finding, PairProbe

NOT_PASSING = ("failed", "timeout", "offline", "degraded")  # a node's pairs a finding about it rests on
MAX_SUPPORT = 50  # probes listed on a finding's page


def chain_lines(chain: Any) -> list[str]:
    """Each link of a finding's evidence chain as one readable line."""
    if chain is None:
        return []
    links = chain if isinstance(chain, list) else [chain]
    return [_line(link) for link in links]


def _line(link: Any) -> str:
    if isinstance(link, Mapping):
        return confirmation_text(link) if "outcome" in link else _fields(link)
    if isinstance(link, list):
        return ", ".join(map(str, link))
    return str(link)


def _look(probe: Mapping[str, Any] | None) -> str:
    """One look at a pair: "timeout (connect_timeout)", "ok, 0.41 GB/s", with its round where known."""
    if not probe:
        return "not probed"
    said = str(probe.get("status") or "?")
    if probe.get("reason"):
        said += f" ({probe['reason']})"
    if probe.get("busbw_gbps") is not None:
        said += f", {probe['busbw_gbps']:.3g} GB/s"
    return f"{said} in round {probe['round']}" if probe.get("round") is not None else said


def confirmation_text(record: Mapping[str, Any]) -> str:
    """What the confirmation pass saw of one pair, in a sentence."""
    parts = [
        f"Confirmation pass: {record.get('outcome')}",
        f"First look: {_look(record.get('first'))}",
        f"Probed again: {_look(record.get('again'))}",
    ]
    partners = record.get("partners") or []
    if partners:
        parts.append(
            "With healthy partners: "
            + "; ".join(f"{s.get('node')} with {s.get('partner')}: {_look(s)}" for s in partners)
        )
    if record.get("culprit"):
        parts.append(f"Points at {record['culprit']}")
    if record.get("load"):
        parts.append(f"Load: {record['load']}")
    return ". ".join(parts) + "."


def _fields(fields: Mapping[str, Any]) -> str:
    """Any other record: "key: value" pairs in key order, nested records in brackets (PostgreSQL's jsonb keeps
    no insertion order, so the page reads the same on either database)."""
    words = []
    for key, value in sorted(fields.items(), key=lambda kv: str(kv[0])):
        shown = f"({_fields(value)})" if isinstance(value, Mapping) else _line(value)
        words.append(f"{str(key).replace('_', ' ')}: {shown}")
    return "; ".join(words)


def support_probes(finding: Finding) -> list[PairProbe]:
    """The probes a finding rests on: the pairs it lists, else the link it names, else the pairs of the node
    it names that did not pass (a node offline or unreachable lists none, and its page must show them)."""
    names = finding.pairs or ([finding.subject] if "<->" in finding.subject else [])
    wanted = [tuple(name.split("<->", 1)) for name in names if "<->" in name]
    rows = PairProbe.objects.filter(sweep_id=finding.sweep_id).select_related("node_a", "node_b")
    if wanted:
        probes = {
            (p.node_a.name, p.node_b.name): p
            for p in rows.filter(node_a__name__in={a for a, _ in wanted}, node_b__name__in={b for _, b in wanted})
        }
        return [probes[k] for k in wanted if k in probes][:MAX_SUPPORT]
    if finding.subject not in (finding.sweep.nodes or []):
        return []
    mine = rows.filter(Q(node_a__name=finding.subject) | Q(node_b__name=finding.subject), status__in=NOT_PASSING)
    return list(mine.order_by("round", "id")[:MAX_SUPPORT])


def probe_line(p: PairProbe) -> str:
    """One probe as a line of a finding's chain: "host1<->host2: timeout at connect (connect_timeout): hint"."""
    where = f" at {p.stage}" if p.stage else ""
    why = f" ({p.reason})" if p.reason else ""
    hint = f": {p.hint}" if p.hint else ""
    return f"{p.node_a.name}<->{p.node_b.name}: {p.status}{where}{why}{hint}"
