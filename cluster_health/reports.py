"""How sweeps and pairs look from outside: the sweep JSON of DESIGN.md, the stored matrix, CSV rows.

The CLI, the API, the broadcasts and the metrics all read these, so a field has
one name everywhere.
"""

from __future__ import annotations

import json

from django.utils import timezone

from agents import contract
from cluster_health import matrix
from cluster_health.models import Finding, GroupProbe, Node, PairProbe, Sweep, SweepMatrix

PAIR_VALUES = ("id", "round", "node_a__name", "node_b__name", "status", "stage", "reason", "latency_us_p50",
               "algbw_gbps", "busbw_gbps", "hint")
# Status codes of the /metrics pair gauge (the matrix has its own, with "untested", in cluster_health.matrix).
STATUS_CODES = {s: i for i, s in enumerate(("pending", "running", *contract.STATUSES))}


def pair_dict_from_values(v: tuple) -> dict:
    pid, rnd, a, b, status, stage, reason, lat, alg, bus, hint = v
    return {"a": a, "b": b, "status": status, "stage": stage, "reason": reason,
            "latency_us": _r(lat), "algbw_gbps": _r(alg, 4), "busbw_gbps": _r(bus, 4), "hint": hint,
            "round": rnd, "probe": pid}


def pair_dict(p: PairProbe) -> dict:
    return pair_dict_from_values(tuple(
        getattr(p, f) if "__" not in f else getattr(getattr(p, f.split("__")[0]), "name") for f in PAIR_VALUES
    ))


def _r(x, nd=1):
    return None if x is None else round(x, nd)


def pair_dicts(sweep: Sweep, qs=None) -> list[dict]:
    qs = qs if qs is not None else PairProbe.objects.filter(sweep=sweep)
    return [pair_dict_from_values(v) for v in qs.order_by("round", "id").values_list(*PAIR_VALUES)]


def group_dict(g: GroupProbe) -> dict:
    return {"kind": g.kind, "nodes": g.nodes, "status": g.status, "stage": g.stage, "reason": g.reason,
            "hint": g.hint, "latency_us": _r(g.latency_us_p50), "busbw_gbps": _r(g.busbw_gbps, 4),
            "ranks": {r: {k: h.get(k) for k in ("node", "status", "stage", "reason", "hint")}
                      for r, h in sorted(g.halves.items(), key=lambda kv: int(kv[0]))}}


def sweep_json(sweep: Sweep, *, with_pairs: bool = True) -> dict:
    """The sweep JSON of DESIGN.md (plus times, progress, groups)."""
    out = {
        "sweep": sweep.pk, "status": sweep.status, "verdict": sweep.verdict, "kind": sweep.kind,
        "backend": sweep.backend, "nodes": list(sweep.nodes), "source": sweep.source,
        "created": sweep.created.isoformat(), "started": sweep.started and sweep.started.isoformat(),
        "finished": sweep.finished and sweep.finished.isoformat(), "duration_s": sweep.duration_s(),
        "round": sweep.current_round, "rounds": sweep.total_rounds,
        "baseline": sweep.baseline_id, "error": sweep.error or None,
    }
    if with_pairs:
        out["pairs"] = pair_dicts(sweep)
        out["groups"] = [group_dict(g) for g in GroupProbe.objects.filter(sweep=sweep)]
    out["findings"] = [f.as_dict() for f in Finding.objects.filter(sweep=sweep)]
    return out


def matrix_text(sweep: Sweep) -> str:
    """The sweep's matrix payload (cluster_health.matrix) as JSON text.

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
    """Store a closed sweep's matrix now (replacing any stored one), so its first reader does not wait."""
    text = json.dumps(build_sweep_matrix(sweep), separators=(",", ":"))
    SweepMatrix.objects.update_or_create(sweep_id=sweep.pk, defaults={"payload": text, "built": timezone.now()})


def build_sweep_matrix(sweep: Sweep) -> dict:
    """The matrix payload built from the sweep's pair rows (one query, no joins)."""
    names = dict(Node.objects.filter(name__in=sweep.nodes).values_list("pk", "name")) if sweep.nodes else {}
    rows = PairProbe.objects.filter(sweep=sweep).order_by().values_list(
        "node_a_id", "node_b_id", "status", "busbw_gbps", "latency_us_p50", "stage", "reason", "hint")
    if not sweep.nodes:  # never planned, or planned before nodes were kept: name them from the rows
        names = dict(Node.objects.filter(pk__in={i for r in rows for i in r[:2]}).values_list("pk", "name"))
    # The same rounding as the sweep JSON, so every view of a pair shows one number.
    return matrix.build_matrix_rows(sweep.nodes or names.values(), (
        (names.get(a), names.get(b), st, None if bw is None else round(bw, 4),
         None if lat is None else round(lat, 1), stage, reason, hint)
        for a, b, st, bw, lat, stage, reason, hint in rows.iterator(chunk_size=20000)))


CSV_HEADER = ["sweep", "round", "a", "b", "status", "stage", "reason", "latency_us", "algbw_gbps",
              "busbw_gbps", "hint"]


def csv_rows(sweep: Sweep):
    yield CSV_HEADER
    for p in pair_dicts(sweep):
        yield [sweep.pk, p["round"], p["a"], p["b"], p["status"], p["stage"] or "", p["reason"] or "",
               _blank(p["latency_us"]), _blank(p["algbw_gbps"]), _blank(p["busbw_gbps"]), p["hint"] or ""]


def _blank(x):
    return "" if x is None else x
