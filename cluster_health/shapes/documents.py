"""How a sweep looks from outside: the sweep JSON (docs/CONTRACT.md), its plan, groups and CSV rows.

The CLI, the API, the pages and the reports all read these, so a field has one name
everywhere; a pair's own shape is cluster_health.shapes.pairs'.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator
from typing import Any

from django.core.serializers.json import DjangoJSONEncoder

from cluster_health import vocabulary
from cluster_health.core import history, problems
from cluster_health.models import Finding, GroupProbe, PairProbe, Sweep
from cluster_health.shapes.gpus import gpu_dicts
from cluster_health.shapes.matrices import collapsed_pairs
from cluster_health.shapes.pairs import gbps, micros, pair_rows


def pair_dicts(sweep: Sweep, qs=None, window: slice | None = None) -> list[dict]:
    """The sweep's pairs in round order; of a collapsed sweep (``manage.py prune``), the rows it kept
    (every pair that did not pass) and then its passing pairs from the stored matrix, in matrix order."""
    if qs is not None or not sweep.collapsed_ok:
        return list(pair_rows(qs if qs is not None else PairProbe.objects.filter(sweep=sweep), window))
    kept = PairProbe.objects.filter(sweep=sweep)
    rows: Iterator[dict] = itertools.chain(pair_rows(kept), collapsed_pairs(sweep))
    if window is not None:
        rows = itertools.islice(rows, window.start, window.stop)
    return list(rows)


def group_dict(g: GroupProbe) -> dict:
    return {
        "kind": g.kind,
        "nodes": g.nodes,
        "status": g.status,
        "stage": g.stage,
        "reason": g.reason,
        "hint": g.hint,
        "latency_us": micros(g.latency_us_p50),
        "busbw_gbps": gbps(g.busbw_gbps),
        "ranks": {
            r: {k: h.get(k) for k in ("node", "status", "stage", "reason", "hint")}
            for r, h in sorted(g.halves.items(), key=lambda kv: int(kv[0]))
        },
    }


def sweep_json(
    sweep: Sweep, *, with_pairs: bool = True, with_progress: bool = False, pair_window: slice | None = None
) -> dict:
    """The sweep JSON of docs/CONTRACT.md (plus times, groups, and on request the progress counts).

    The one summary of a sweep: the CLI, the API, the pages and the reports all read it.
    ``pair_window`` keeps one page of the pairs (in round order), for the API.
    """
    out = {
        "sweep": sweep.pk,
        "status": sweep.status,
        "verdict": sweep.verdict,
        "kind": sweep.kind,
        "backend": sweep.backend,
        "nodes": list(sweep.nodes),
        "source": sweep.source,
        "created": sweep.created.isoformat(),
        "started": sweep.started and sweep.started.isoformat(),
        "finished": sweep.finished and sweep.finished.isoformat(),
        "duration_s": sweep.duration_s(),
        "round": sweep.current_round,
        "rounds": sweep.total_rounds,
        # "confirming" while the confirmation pass probes the sweep's suspects again, else "probing".
        "phase": sweep.phase,
        "confirmation": sweep.confirmation(),
        "baseline": sweep.baseline_id,
        "error": sweep.error or None,
        # Pending behind these running sweeps over some of its nodes (one sweep per node at a time).
        "queued_behind": list(sweep.params.get("queued_behind") or []) if sweep.status == "pending" else [],
        # Retention deleted its passing pair rows: those pairs come from the stored matrix, without probe ids.
        "collapsed": bool(sweep.collapsed_ok),
        # Nodes of the fleet that were offline when the sweep was planned: in it, but not probed.
        "offline_at_start": [
            {"node": n, "last_heartbeat": beat} for n, beat in (sweep.params.get("offline_at_start") or {}).items()
        ],
    }
    plan = plan_json(sweep)
    if plan:
        out["plan"] = plan
    if with_pairs:
        out["pairs"] = pair_dicts(sweep, window=pair_window)
        out["groups"] = [group_dict(g) for g in GroupProbe.objects.filter(sweep=sweep)]
        out["gpus"] = gpu_dicts(sweep) if sweep.kind in vocabulary.GPU_SWEEP_KINDS else []
    if with_progress:
        out["progress"] = sweep.progress()
    findings = list(Finding.objects.filter(sweep=sweep))
    out["findings"] = [{**f.as_dict(), "id": f.pk} for f in findings]
    out["problems"] = problem_dicts(sweep, findings)
    out["trending_down"] = trending_down(findings)
    return out


def problem_dicts(sweep: Sweep, findings: list[Finding]) -> list[dict]:
    """The sweep's problems (core/problems.py), one per culprit, fail first: ``severity``, ``kind``,
    ``culprit``, ``text`` and ``findings``, the ids of the findings it rests on."""
    rows = [
        {
            "severity": f.severity,
            "code": f.code,
            "subject": f.subject,
            "text": f.text,
            "pairs": f.pairs,
            "detail": f.detail,
        }
        for f in findings
    ]
    found = problems.problems(rows, sweep.nodes)
    return [{**p, "findings": [findings[i].pk for i in p["findings"]]} for p in found]


def plan_json(sweep: Sweep) -> dict:
    """How a large-fleet kind chose its pairs: a sampled sweep's rounds and seed (to draw them again), a
    topology sweep's groups with their sizes, a bisect sweep's phase. Empty for the other kinds."""
    params = sweep.params
    if sweep.kind == "sampled":
        return {"sample_rounds": params.get("rounds"), "seed": params.get("seed")}
    if sweep.kind == "topology" and "groups" in params:
        return {"groups": {g: len(members) for g, members in params["groups"].items()}}
    if sweep.kind == "bisect" and "bisect_phase" in params:
        return {"bisect_phase": params["bisect_phase"]}
    return {}


def trending_down(findings: list[Finding]) -> list[dict]:
    """The links the sweep's drift findings name, with their busbw then and now (history.trending_down)."""
    return history.trending_down({"code": f.code, "subject": f.subject, "detail": f.detail} for f in findings)


def json_object(fields: dict[str, Any], raw_members: dict[str, str] | None = None, spread: str | None = None) -> str:
    """A JSON object of ``fields``, plus members whose values are already JSON text, plus the members
    of ``spread`` (JSON text of an object). A stored matrix of megabytes passes through as text,
    never decoded and encoded again."""
    members = [f"{json.dumps(k)}: {json.dumps(v, cls=DjangoJSONEncoder)}" for k, v in fields.items()]
    members += [f"{json.dumps(k)}: {text}" for k, text in (raw_members or {}).items()]
    if spread is not None:
        inner = spread.strip()
        if not (inner.startswith("{") and inner.endswith("}")):
            raise ValueError("spread: expected the JSON text of an object")
        if inner[1:-1].strip():
            members.append(inner[1:-1])
    return "{" + ", ".join(members) + "}"


CSV_HEADER = ["sweep", "round", "a", "b", "status", "stage", "reason", "latency_us", "algbw_gbps", "busbw_gbps", "hint"]


def csv_rows(sweep: Sweep):
    yield CSV_HEADER
    for p in pair_dicts(sweep):
        yield [
            sweep.pk,
            p["round"],
            p["a"],
            p["b"],
            p["status"],
            p["stage"] or "",
            p["reason"] or "",
            _blank(p["latency_us"]),
            _blank(p["algbw_gbps"]),
            _blank(p["busbw_gbps"]),
            csv_text(p["hint"] or ""),
        ]


_FORMULA_PREFIXES = ("=", "+", "-", "@", "\t", "\r")


def csv_text(text: str) -> str:
    """A text cell a spreadsheet will not run: agent hints starting like a formula get a leading quote."""
    return "'" + text if text.startswith(_FORMULA_PREFIXES) else text


def _blank(x):
    return "" if x is None else x
