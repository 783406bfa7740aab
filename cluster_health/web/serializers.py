"""How sweeps and pairs look from outside: the sweep JSON of DESIGN.md, the stored matrix, CSV rows.

The CLI, the API, the broadcasts and the metrics all read these, so a field has
one name everywhere.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator, Mapping
from typing import Any

from django.conf import settings
from django.core.serializers.json import DjangoJSONEncoder
from django.db.models import F
from django.utils import timezone

from agents import contract
from cluster_health.core import evidence, groupmatrix, history, matrix
from cluster_health.models import Finding, GroupProbe, Node, PairProbe, Sweep, SweepMatrix
from cluster_health.sweeps import grouping

READ_CHUNK = 20000  # pair rows per round trip when a whole sweep is read
# The pair fields every outside view reads, by PairProbe field name; ``a``/``b`` are the node names.
PAIR_FIELDS = (
    "id",
    "round",
    "a",
    "b",
    "status",
    "stage",
    "reason",
    "latency_us_p50",
    "algbw_gbps",
    "busbw_gbps",
    "hint",
    "evidence",
)
PAIR_MODEL_FIELDS = tuple(f for f in PAIR_FIELDS if f not in ("a", "b"))  # read as they are; a, b via the nodes
# Status codes of the /metrics pair gauge (the matrix has its own, with "untested", in core.matrix).
STATUS_CODES = {s: i for i, s in enumerate((*contract.OPEN_STATUSES, *contract.STATUSES))}


def pair_dict(row: Mapping[str, Any]) -> dict:
    """A pair as DESIGN.md's sweep JSON names it, from PairProbe field values (``latency_us_p50`` is ``latency_us``)."""
    return {
        "a": row["a"],
        "b": row["b"],
        "status": row["status"],
        "stage": row["stage"],
        "reason": row["reason"],
        "latency_us": _r(row["latency_us_p50"]),
        "algbw_gbps": _r(row["algbw_gbps"], 4),
        "busbw_gbps": _r(row["busbw_gbps"], 4),
        "hint": row["hint"],
        "round": row["round"],
        "probe": row["id"],
        "evidence": evidence.summary(row.get("evidence")),
    }


def pair_dict_of(p: PairProbe) -> dict:
    """``pair_dict`` of a PairProbe instance (its nodes selected with it)."""
    return pair_dict({**{f: getattr(p, f) for f in PAIR_MODEL_FIELDS}, "a": p.node_a.name, "b": p.node_b.name})


def pair_rows(qs, window: slice | None = None) -> Iterator[dict]:
    """``pair_dict`` of every probe in a PairProbe queryset, in round order, read as values.

    ``window`` (a slice of that order) reads one page of them, as the API does.
    """
    rows = qs.order_by("round", "id").values(*PAIR_MODEL_FIELDS, a=F("node_a__name"), b=F("node_b__name"))
    if window is not None:
        rows = rows[window]
    return (pair_dict(row) for row in rows.iterator(chunk_size=READ_CHUNK))


def _r(x, nd=1):
    return None if x is None else round(x, nd)


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


def collapsed_pairs(sweep: Sweep) -> Iterator[dict]:
    """The passing pairs of a collapsed sweep, from its stored matrix: no probe id, round or evidence kept.

    A pair probe is two ranks, so its algbw is its busbw; a and b are in matrix (name) order.
    """
    stored = SweepMatrix.objects.filter(sweep=sweep).values_list("payload", flat=True).first()
    if stored is None:
        return
    payload = json.loads(stored)
    names, codes = payload["nodes"], payload["status_codes"]
    status = matrix.decode(payload["status"], "B")
    busbw, latency = matrix.decode(payload["busbw_gbps"], "f"), matrix.decode(payload["latency_us"], "f")
    ok = codes.index("ok")
    n, k = len(names), 0
    for i in range(n):
        for j in range(i + 1, n):
            if status[k] == ok:
                bw = None if busbw[k] != busbw[k] else _r(busbw[k], 4)
                yield {
                    "a": names[i],
                    "b": names[j],
                    "status": "ok",
                    "stage": sweep.last_stage,
                    "reason": None,
                    "latency_us": None if latency[k] != latency[k] else _r(latency[k]),
                    "algbw_gbps": bw,
                    "busbw_gbps": bw,
                    "hint": None,
                    "round": None,
                    "probe": None,
                    "evidence": None,
                }
            k += 1


def group_dict(g: GroupProbe) -> dict:
    return {
        "kind": g.kind,
        "nodes": g.nodes,
        "status": g.status,
        "stage": g.stage,
        "reason": g.reason,
        "hint": g.hint,
        "latency_us": _r(g.latency_us_p50),
        "busbw_gbps": _r(g.busbw_gbps, 4),
        "ranks": {
            r: {k: h.get(k) for k in ("node", "status", "stage", "reason", "hint")}
            for r, h in sorted(g.halves.items(), key=lambda kv: int(kv[0]))
        },
    }


def sweep_json(
    sweep: Sweep, *, with_pairs: bool = True, with_progress: bool = False, pair_window: slice | None = None
) -> dict:
    """The sweep JSON of DESIGN.md (plus times, groups, and on request the progress counts).

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
        "baseline": sweep.baseline_id,
        "error": sweep.error or None,
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
    if with_progress:
        out["progress"] = sweep.progress()
    findings = list(Finding.objects.filter(sweep=sweep))
    out["findings"] = [f.as_dict() for f in findings]
    out["trending_down"] = trending_down(findings)
    return out


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


def matrix_text(sweep: Sweep) -> str:
    """The sweep's matrix payload (cluster_health.core.matrix) as JSON text.

    A closed sweep's matrix no longer changes: it is stored on first use (``finish``
    stores it as the sweep ends) and read back as text from then on. An open sweep's
    is built from its rows on every call.
    """
    if not sweep.is_open:
        stored = SweepMatrix.objects.filter(sweep_id=sweep.pk).values_list("payload", flat=True).first()
        if stored is not None:
            return stored
    text = json.dumps(build_sweep_matrix(sweep), separators=(",", ":"))
    if not sweep.is_open:
        SweepMatrix.objects.bulk_create([SweepMatrix(sweep_id=sweep.pk, payload=text)], ignore_conflicts=True)
    return text


def store_matrix(sweep: Sweep) -> None:
    """Store a closed sweep's matrix and group matrix now (replacing any stored), so its first reader does not wait.

    Never for a collapsed sweep: its matrix holds the passing pairs whose rows are gone.
    """
    if sweep.collapsed_ok:
        return
    arrays = sweep_matrix_arrays(sweep)
    text = json.dumps(arrays.payload(), separators=(",", ":"))
    groups = build_group_text(sweep, arrays)
    SweepMatrix.objects.update_or_create(
        sweep_id=sweep.pk, defaults={"payload": text, "groups": groups, "built": timezone.now()}
    )


def build_sweep_matrix(sweep: Sweep) -> dict:
    """The matrix payload built from the sweep's pair rows (one query, no joins)."""
    return sweep_matrix_arrays(sweep).payload()


def sweep_matrix_arrays(sweep: Sweep, only: list[str] | None = None) -> matrix.MatrixArrays:
    """The sweep's matrix from its pair rows, over all its nodes or ``only`` those named (a drill-down)."""
    named = only if only is not None else sweep.nodes
    names = dict(Node.objects.filter(name__in=named).values_list("pk", "name")) if named else {}
    rows = PairProbe.objects.filter(sweep=sweep).order_by()
    if only is not None:
        rows = rows.filter(node_a_id__in=list(names), node_b_id__in=list(names))
    rows = rows.values_list(
        "node_a_id", "node_b_id", "status", "busbw_gbps", "latency_us_p50", "stage", "reason", "hint"
    )
    if not named:  # never planned, or planned before nodes were kept: name them from the rows
        names = dict(Node.objects.filter(pk__in={i for r in rows for i in r[:2]}).values_list("pk", "name"))
    # The same rounding as the sweep JSON, so every view of a pair shows one number.
    return matrix.build_matrix_arrays(
        (names.values() if not sweep.nodes else sweep.nodes) if only is None else only,
        (
            (
                names.get(a),
                names.get(b),
                st,
                None if bw is None else round(bw, 4),
                None if lat is None else round(lat, 1),
                stage,
                reason,
                hint,
            )
            for a, b, st, bw, lat, stage, reason, hint in rows.iterator(chunk_size=READ_CHUNK)
        ),
    )


def build_group_text(sweep: Sweep, arrays: matrix.MatrixArrays) -> str:
    """The group matrix of a sweep's node matrix as JSON text (or, past groupmatrix.MAX_GROUPS, what to do)."""
    head = {"sweep": sweep.pk, "grouping": "planned" if sweep.kind == "topology" else "current"}
    try:
        payload = groupmatrix.build(arrays, grouping.sweep_groups(sweep, arrays.nodes))
    except groupmatrix.TooManyGroups as exc:
        payload = {"groups": None, "nodes": len(arrays.nodes), "message": str(exc)}
    return json.dumps({**head, **payload}, separators=(",", ":"))


def group_matrix_text(sweep: Sweep) -> str:
    """The sweep's group matrix (cluster_health.core.groupmatrix) as JSON text.

    A closed sweep's is stored beside its matrix, grouped as the nodes were when it
    was first read; an open sweep's is built from its pair rows on every call.
    """
    if sweep.is_open:
        return build_group_text(sweep, sweep_matrix_arrays(sweep))
    stored = SweepMatrix.objects.filter(sweep_id=sweep.pk).values_list("groups", flat=True).first()
    if stored:
        return stored
    text = build_group_text(sweep, matrix.MatrixArrays.of_payload(json.loads(matrix_text(sweep))))
    SweepMatrix.objects.filter(sweep_id=sweep.pk).update(groups=text)
    return text


class DrillDownError(ValueError):
    """A drill-down that names no group of the sweep (status 404), or one too large to draw (400)."""

    def __init__(self, message: str, status: int = 400):
        super().__init__(message)
        self.status = status


def drill_down_text(sweep: Sweep, wanted: list[str]) -> str:
    """The node matrix over the members of one or two of the sweep's groups, as JSON text."""
    nodes = list(sweep.nodes) or matrix.MatrixArrays.of_payload(json.loads(matrix_text(sweep))).nodes
    group_of = grouping.sweep_groups(sweep, nodes)
    known = set(group_of.values()) | {n for n in nodes if not group_of.get(n)}
    unknown = [g for g in wanted if g not in known]
    if unknown:
        raise DrillDownError(f"sweep {sweep.pk} has no group {unknown[0]!r}", status=404)
    members = groupmatrix.members(group_of, nodes, wanted)
    if len(members) > settings.DRILL_DOWN_MAX_NODES:
        raise DrillDownError(
            f"groups {', '.join(wanted)} hold {len(members)} nodes, more than CLUSTER_HEALTH_DRILL_DOWN_MAX_NODES "
            f"({settings.DRILL_DOWN_MAX_NODES})"
        )
    if sweep.collapsed_ok:  # its passing pairs live in the stored matrix only
        arrays = matrix.MatrixArrays.of_payload(json.loads(matrix_text(sweep))).restricted(members)
    else:
        arrays = sweep_matrix_arrays(sweep, only=members)
    member_groups = [group_of.get(n) or n for n in arrays.nodes]
    return json.dumps(
        {"sweep": sweep.pk, "groups": wanted, "member_groups": member_groups, **arrays.payload()}, separators=(",", ":")
    )


def node_matrix_shown(sweep: Sweep) -> bool:
    """Whether pages draw the sweep's node matrix (else its group matrix): CLUSTER_HEALTH_NODE_MATRIX_MAX_NODES."""
    return len(sweep.nodes or ()) <= settings.NODE_MATRIX_MAX_NODES


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
