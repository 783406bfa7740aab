"""A finding's evidence chain in words, for its "why" page.

Rules keep their chain as they found it (``detail.evidence``): sentences, figures, and for the
confirmation pass one record per pair (core/confirmation.py: ``outcome``, the ``first`` and the
``again`` probe, each side's ``partners``, the ``culprit``). A page shows each as a sentence, never
as the Python dict it is stored as.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


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
    """Any other record: "key: value" pairs, nested records in brackets."""
    words = []
    for key, value in fields.items():
        shown = f"({_fields(value)})" if isinstance(value, Mapping) else _line(value)
        words.append(f"{str(key).replace('_', ' ')}: {shown}")
    return "; ".join(words)
