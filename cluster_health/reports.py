"""How sweeps and pairs look from outside: the sweep JSON of DESIGN.md, the compact matrix, CSV rows.

The CLI, the API, the broadcasts and the metrics all read these, so a field has
one name everywhere.
"""

from __future__ import annotations

from agents import contract
from cluster_health.models import Finding, GroupProbe, PairProbe, Sweep

PAIR_VALUES = ("id", "round", "node_a__name", "node_b__name", "status", "stage", "reason", "latency_us_p50",
               "algbw_gbps", "busbw_gbps", "hint")
# Matrix status codes: small integers keep a 1,024-node matrix compact.
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


def matrix(sweep: Sweep) -> dict:
    """Compact matrix: node list plus parallel arrays indexed by pair (a, b are node indexes)."""
    index = {n: i for i, n in enumerate(sweep.nodes)}
    a, b, status, busbw, latency, rounds = [], [], [], [], [], []
    rows = PairProbe.objects.filter(sweep=sweep).values_list(
        "node_a__name", "node_b__name", "status", "busbw_gbps", "latency_us_p50", "round")
    for na, nb, st, bw, lat, rnd in rows.iterator(chunk_size=10000):
        a.append(index.get(na, -1))
        b.append(index.get(nb, -1))
        status.append(STATUS_CODES[st])
        busbw.append(None if bw is None else round(bw, 3))
        latency.append(None if lat is None else round(lat, 1))
        rounds.append(rnd)
    return {"sweep": sweep.pk, "status": sweep.status, "verdict": sweep.verdict, "nodes": list(sweep.nodes),
            "status_codes": list(STATUS_CODES), "a": a, "b": b, "status": status, "busbw_gbps": busbw,
            "latency_us": latency, "round": rounds}


CSV_HEADER = ["sweep", "round", "a", "b", "status", "stage", "reason", "latency_us", "algbw_gbps",
              "busbw_gbps", "hint"]


def csv_rows(sweep: Sweep):
    yield CSV_HEADER
    for p in pair_dicts(sweep):
        yield [sweep.pk, p["round"], p["a"], p["b"], p["status"], p["stage"] or "", p["reason"] or "",
               _blank(p["latency_us"]), _blank(p["algbw_gbps"]), _blank(p["busbw_gbps"]), p["hint"] or ""]


def _blank(x):
    return "" if x is None else x
