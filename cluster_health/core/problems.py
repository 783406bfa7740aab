"""A sweep's problems: its findings grouped by the culprit they name, one line each. Pure.

One fault is often several findings: a slow node, the links below their baseline that it
slows, and what the confirmation pass saw of them; a dead agent and the group collective it
stopped. An operator reads the culprits first ("3 problems: host5's agent is down;
host1<->host2 blocked: connections time out (a firewall?); host3's links at ~190 Mbit/s"), each
opening into the findings it rests on.

The rules, the same from sweep to sweep:

- Only ``fail`` and ``warn`` findings make a problem; an ``info`` line (what the confirmation
  pass cleared, a sweep slow everywhere) joins the problem it is about, or none.
- A finding about a node, a segment or the fleet is a culprit of its own; a finding about a link
  joins the culprit whose finding lists that link among its pairs (a slow node's links, a
  firewalled node's failed pairs), or a node whose every bad pair is its own (an offline or
  unreachable node), else it is the culprit itself.
- A problem's severity is the highest among its findings; fail problems come first.

Findings are the sweep's rows as dicts: ``severity``, ``code``, ``subject``, ``text``, and where
known ``pairs`` ("a<->b" names) and ``detail`` (``busbw_gbps``: the slow figure a slow node or
link runs at).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

SEVERITY_RANK = {"info": 0, "warn": 1, "fail": 2}
PROBLEM_SEVERITIES = ("fail", "warn")
# Node findings that blame every bad pair of their node, though they list none.
OWNS_NODE_PAIRS = ("node_offline", "node_unreachable")
MAX_SUMMARY = 5  # problems named in the one-line summary; the rest are counted
MAX_HEADLINE = 140

# What a link's failure most likely means, by its reason (docs/VOCABULARY.md, "Reason codes").
REASON_WORDS = {
    "connect_timeout": "blocked: connections time out (a firewall dropping packets?)",
    "refused": "refused: nothing listens on the store port, or a firewall rejects",
    "unreachable": "unreachable: no route between them",
    "dns": "a name does not resolve",
    "transport": "the process group cannot connect its ranks (a firewall on Gloo's or NCCL's ports?)",
    "store_timeout": "a rank never arrived at the store",
    "collective_timeout": "a collective stopped answering",
    "version_mismatch": "torch, CUDA or NCCL differ on the two sides",
    "size_stall": "large messages never complete (an MTU mismatch?)",
}
_REASON_IN_TEXT = re.compile(r"\((\w+)\)")


def culprit_of(finding: Mapping[str, Any], nodes: set[str]) -> tuple[str, str]:
    """What a finding blames: (kind, name), kind one of node, link, segment, fleet."""
    subject = str(finding.get("subject") or "")
    if finding.get("code") == "segment":
        return "segment", subject
    if _link(subject) is not None:
        return "link", subject
    if subject in nodes:
        return "node", subject
    return "fleet", subject


def _link(name: str) -> frozenset[str] | None:
    ends = name.split("<->")
    return frozenset(ends) if len(ends) == 2 and all(ends) else None


class _Problem:
    def __init__(self, kind: str, culprit: str) -> None:
        self.kind, self.culprit = kind, culprit
        self.members: list[int] = []
        self.links: set[frozenset[str]] = set()
        self.owns_node_pairs = False

    def add(self, index: int, finding: Mapping[str, Any]) -> None:
        self.members.append(index)
        self.links |= {link for name in finding.get("pairs") or () if (link := _link(str(name)))}
        self.owns_node_pairs |= finding.get("code") in OWNS_NODE_PAIRS

    def holds(self, link: frozenset[str]) -> bool:
        return link in self.links or (self.kind == "node" and self.owns_node_pairs and self.culprit in link)


def problems(findings: Sequence[Mapping[str, Any]], nodes: Iterable[str]) -> list[dict[str, Any]]:
    """The sweep's problems, fail first: ``severity``, ``kind``, ``culprit``, ``text`` (one line) and
    ``findings`` (indexes into ``findings``, the evidence, in their order)."""
    names = set(nodes)
    keyed: dict[tuple[str, Any], _Problem] = {}

    def key(kind: str, culprit: str) -> tuple[str, Any]:
        return (kind, _link(culprit) if kind == "link" else culprit)

    def problem_for(kind: str, culprit: str) -> _Problem:
        return keyed.setdefault(key(kind, culprit), _Problem(kind, culprit))

    def severity(p: _Problem) -> int:
        return max(SEVERITY_RANK.get(str(findings[i]["severity"]), 0) for i in p.members)

    raising = [(i, f) for i, f in enumerate(findings) if f.get("severity") in PROBLEM_SEVERITIES]
    # Node, segment and fleet culprits first, so a link finding can find the culprit that lists it.
    for i, f in raising:
        kind, culprit = culprit_of(f, names)
        if kind != "link":
            problem_for(kind, culprit).add(i, f)
    for i, f in raising:
        kind, culprit = culprit_of(f, names)
        if kind == "link":
            holder = _holder(keyed.values(), _link(culprit), severity)
            (holder or problem_for(kind, culprit)).add(i, f)
    for i, f in enumerate(findings):
        if f.get("severity") in PROBLEM_SEVERITIES:
            continue
        kind, culprit = culprit_of(f, names)
        same = keyed.get(key(kind, culprit))
        holder = same or (_holder(keyed.values(), _link(culprit), severity) if kind == "link" else None)
        if holder is not None:
            holder.add(i, f)
    ordered = sorted(keyed.values(), key=lambda p: (-severity(p), min(p.members)))
    out = []
    for p in ordered:
        members = sorted(p.members)
        worst = max(members, key=lambda i: (SEVERITY_RANK.get(str(findings[i]["severity"]), 0), -i))
        # The culprit's own finding speaks for it (a slow node, not one of its links), else the worst.
        own = next((i for i in members if culprit_of(findings[i], names) == (p.kind, p.culprit)), worst)
        out.append(
            {
                "severity": "fail" if severity(p) == SEVERITY_RANK["fail"] else "warn",
                "kind": p.kind,
                "culprit": p.culprit,
                "text": headline(findings[own]),
                "findings": members,
            }
        )
    return out


def _holder(problems: Iterable[_Problem], link: frozenset[str] | None, severity: Any) -> _Problem | None:
    """The most severe node, segment or fleet problem that holds this link, if any."""
    if link is None:
        return None
    holding = [p for p in problems if p.kind != "link" and p.holds(link)]
    return max(holding, key=lambda p: (severity(p), -min(p.members)), default=None)


def speed(gbps: float) -> str:
    """A busbw as an operator says it: "~190 Mbit/s" below 1 GB/s, else "~12 GB/s"."""
    if gbps < 1:
        mbit = gbps * 8000
        return f"~{float(f'{mbit:.2g}'):g} Mbit/s"
    return f"~{float(f'{gbps:.2g}'):g} GB/s"


def headline(finding: Mapping[str, Any]) -> str:
    """A finding's culprit in a few words: "host5's agent is down", "host3's links at ~190 Mbit/s"."""
    code, subject = finding.get("code"), str(finding.get("subject") or "")
    text = str(finding.get("text") or "")
    bw = (finding.get("detail") or {}).get("busbw_gbps")
    if code == "node_offline":
        return f"{subject}'s agent is down"
    if code == "node_unreachable":
        return f"{subject} fails with every peer"
    if code == "inbound_blocked":
        return f"{subject} accepts no inbound connection (a firewall?)"
    if code == "unroutable_address":
        return f"{subject} advertises an address its peers cannot reach"
    if code == "node_common_factor":
        return f"{subject} is in every failing pair"
    if code == "lossy":
        return f"{subject} loses packets (cable or optic?)"
    if code == "slow_node" and isinstance(bw, int | float):
        return f"{subject}'s links at {speed(bw)}"
    if code == "slow_link" and isinstance(bw, int | float):
        return f"{subject} at {speed(bw)}"
    if code == "link_failed":
        said = _REASON_IN_TEXT.search(text)
        if said and said[1] in REASON_WORDS:
            return f"{subject} {REASON_WORDS[said[1]]}"
    if code == "below_baseline" and _link(subject) is not None:
        return f"{subject} below its baseline"
    first = re.split(r": |; ", text, maxsplit=1)[0]
    if first.count("(") > first.count(")"):  # cut inside a bracket: "fails (4 of 4" reads as "fails"
        first = first[: first.rindex("(")].rstrip()
    return first if len(first) <= MAX_HEADLINE else first[: MAX_HEADLINE - 1] + "…"


def summary(found: Sequence[Mapping[str, Any]]) -> str:
    """The problems in one line: "No problems.", "3 problems: host5's agent is down; ...".

    The first MAX_SUMMARY are named, the rest counted."""
    if not found:
        return "No problems."
    named = "; ".join(str(p["text"]) for p in found[:MAX_SUMMARY])
    more = f"; and {len(found) - MAX_SUMMARY} more" if len(found) > MAX_SUMMARY else ""
    return f"{len(found)} problem{'s' if len(found) != 1 else ''}: {named}{more}"
