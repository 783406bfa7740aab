"""A sweep's lifecycle: request, start (plan), dispatch round by round, finish with a verdict, cancel.

Every step claims its row with a conditional UPDATE and checks the row count, so
a step delivered twice (a retried task, the reaper racing ingest) runs once.
Sends happen after the commit, through ``dispatch``.
"""

from __future__ import annotations

import logging
from datetime import timedelta
from statistics import median

from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from agents import contract
from cluster_health import broadcast, bulk, discovery, dispatch, planner, verdicts
from cluster_health.models import (
    OPEN_PAIR_STATUSES, Baseline, BaselinePair, Finding, GroupProbe, Node, PairProbe, Sweep, pair_key,
)

log = logging.getLogger(__name__)
TASK_START = "cluster_health.start_sweep"
TASK_ADVANCE = "cluster_health.advance_sweep"
MAX_NODES = contract.MAX_WORLD_SIZE
MAX_PAIRS = 10000
ROLLING_BASELINE_SWEEPS = 5


class SweepRequestError(ValueError):
    """A sweep request is out of bounds; the text names the parameter."""


def _int(params: dict, key: str, lo: int, hi: int):
    val = params.get(key)
    if val is None:
        return None
    if isinstance(val, bool) or not isinstance(val, int) or not lo <= val <= hi:
        raise SweepRequestError(f"{key}: expected a whole number in {lo}..{hi}, got {val!r}")
    return val


def clean_request(kind: str = "full", backend: str = "gloo", nodes=None, **params) -> dict:
    """Validate and bound a sweep request; returns the fields to store, or raises SweepRequestError."""
    if kind not in planner.KINDS:
        raise SweepRequestError(f"kind: {kind!r} is not one of {', '.join(planner.KINDS)}")
    if backend not in contract.BACKENDS:
        raise SweepRequestError(f"backend: {backend!r} is not one of {', '.join(contract.BACKENDS)}")
    clean: dict = {}
    try:
        if nodes:
            if not isinstance(nodes, list) or len(nodes) > MAX_NODES:
                raise SweepRequestError(f"nodes: expected a list of at most {MAX_NODES} node names")
            clean["nodes"] = [contract.check_node_name(n, "nodes") for n in nodes]
            if len(set(clean["nodes"])) != len(clean["nodes"]):
                raise SweepRequestError("nodes: a node is listed twice")
        if params.get("sizes") is not None:
            clean["sizes"] = contract.validate_sizes(params["sizes"])
        if params.get("timeouts") is not None:
            clean["timeouts"] = contract.validate_timeouts(params["timeouts"])
        for key, hi in (("iterations", contract.MAX_ITERATIONS), ("warmup", contract.MAX_WARMUP),
                        ("latency_iterations", contract.MAX_ITERATIONS), ("master_port", 65535)):
            val = _int(params, key, 0 if key == "warmup" else 1, hi)
            if val is not None:
                clean[key] = val
        if params.get("deadline_s") is not None:
            d = params["deadline_s"]
            if isinstance(d, bool) or not isinstance(d, (int, float)) or not 1 <= d <= contract.MAX_DEADLINE_S:
                raise SweepRequestError(f"deadline_s: expected seconds in 1..{contract.MAX_DEADLINE_S}")
            clean["deadline_s"] = float(d)
        if params.get("last_stage") is not None:
            if params["last_stage"] not in ("collective", "bandwidth"):
                raise SweepRequestError("last_stage: expected collective or bandwidth")
            clean["last_stage"] = params["last_stage"]
        if params.get("multi_group"):
            clean["multi_group"] = True
        if params.get("env"):
            probe = contract.validate_command({"v": 1, "kind": "preflight", "probe_id": 0, "rendezvous": "x" * 8,
                                               "node": "n", "rank": 0, "bind_address": "h",
                                               "master_address": "h", "env": params["env"]})
            clean["env"] = probe["env"]
        if params.get("master") is not None:
            clean["master"] = contract.check_node_name(params["master"], "master")
    except contract.ContractError as exc:
        raise SweepRequestError(str(exc)) from None
    if kind == "pairs":
        raw = params.get("pairs")
        if not isinstance(raw, list) or not raw or len(raw) > MAX_PAIRS:
            raise SweepRequestError(f"pairs: a pairs sweep needs a list of 1..{MAX_PAIRS} [a, b] pairs")
        try:
            clean["pairs"] = [[contract.check_node_name(a, "pairs"), contract.check_node_name(b, "pairs")]
                              for a, b in raw]
        except (TypeError, ValueError) as exc:
            raise SweepRequestError(f"pairs: expected [a, b] node-name pairs ({exc})") from None
    if kind == "preflight" and clean.get("master_port") is None:
        raise SweepRequestError("master_port: a launch rehearsal needs the MASTER_PORT the job will use")
    baseline = params.get("baseline")
    if baseline is not None:
        clean["baseline"] = _clean_baseline_spec(baseline)
    return {"kind": kind, "backend": backend, "params": clean}


def _clean_baseline_spec(spec) -> str:
    spec = str(spec)
    if spec in ("none", "rolling") or (spec.startswith(("sweep:", "baseline:")) and spec.split(":", 1)[1].isdigit()):
        return spec
    raise SweepRequestError(f"baseline: {spec!r} is not none, rolling, sweep:<id> or baseline:<id>")


def request_sweep(*, source: str, user=None, **request) -> Sweep:
    """Create a pending sweep and ask the server worker to start it once the row is committed."""
    fields = clean_request(**request)
    with transaction.atomic():
        sweep = Sweep.objects.create(source=source, requested_by=user if user and user.is_authenticated else None,
                                     **fields)
        transaction.on_commit(lambda: dispatch.send_to_server(TASK_START, sweep_id=sweep.pk))
    return sweep


# -- baselines ---------------------------------------------------------------------------------------------


def baseline_from_sweep(sweep: Sweep, name: str | None = None) -> Baseline:
    base = Baseline.objects.create(name=name or f"sweep {sweep.pk}", source="sweep", from_sweep=sweep,
                                   sweeps_used=[sweep.pk])
    rows = PairProbe.objects.filter(sweep=sweep, status__in=("ok", "degraded"), busbw_gbps__isnull=False)
    BaselinePair.objects.bulk_create(
        [BaselinePair(baseline=base, node_a=k[0], node_b=k[1], busbw_gbps=bw)
         for k, bw in {pair_key(a, b): bw for a, b, bw in rows.values_list(
             "node_a__name", "node_b__name", "busbw_gbps")}.items()],
        batch_size=5000,
    )
    return base


def rolling_baseline(last: int = ROLLING_BASELINE_SWEEPS) -> Baseline | None:
    """Median busbw per pair over the last good nightly full sweeps; None if there is none yet."""
    good = list(Sweep.objects.filter(kind="full", source="schedule", status="finished",
                                     verdict__in=("pass", "warn")).order_by("-finished")
                .values_list("pk", flat=True)[:last])
    if not good:
        return None
    samples: dict[tuple[str, str], list[float]] = {}
    rows = PairProbe.objects.filter(sweep_id__in=good, status="ok", busbw_gbps__isnull=False).values_list(
        "node_a__name", "node_b__name", "busbw_gbps")
    for a, b, bw in rows.iterator(chunk_size=10000):
        samples.setdefault(pair_key(a, b), []).append(bw)
    base = Baseline.objects.create(name=f"rolling median of {len(good)} nightly sweeps", source="rolling",
                                   sweeps_used=good)
    BaselinePair.objects.bulk_create(
        [BaselinePair(baseline=base, node_a=k[0], node_b=k[1], busbw_gbps=median(v)) for k, v in samples.items()],
        batch_size=5000,
    )
    return base


def resolve_baseline(spec: str | None) -> Baseline | None:
    if spec is None or spec == "rolling":
        return rolling_baseline()
    if spec == "none":
        return None
    what, pk = spec.split(":", 1)
    if what == "baseline":
        return Baseline.objects.filter(pk=int(pk)).first()
    source = Sweep.objects.filter(pk=int(pk)).first()
    return baseline_from_sweep(source) if source else None


# -- lifecycle ---------------------------------------------------------------------------------------------


def _fail(sweep: Sweep, error: str) -> None:
    Sweep.objects.filter(pk=sweep.pk, status__in=Sweep.OPEN_STATUSES).update(
        status="failed", verdict="unknown", error=error[:4000], finished=timezone.now())
    sweep.refresh_from_db()
    broadcast.sweep_update(sweep)
    log.warning("sweep %s failed: %s", sweep.pk, error)


def start_sweep(sweep_id: int) -> bool:
    """Plan a pending sweep, create its probe rows and dispatch round 1. False if already started."""
    now = timezone.now()
    with transaction.atomic():
        if not Sweep.objects.filter(pk=sweep_id, status="pending").update(status="running", started=now):
            return False
        sweep = Sweep.objects.get(pk=sweep_id)
        params = sweep.params
        wanted = params.get("nodes")
        if params.get("pairs") and not wanted:
            wanted = list(dict.fromkeys(n for pair in params["pairs"] for n in pair))
        if wanted:
            known = {n.name: n for n in Node.objects.filter(name__in=wanted)}
            unknown = [n for n in wanted if n not in known]
            if unknown:
                _fail(sweep, f"nodes: unknown node(s) {', '.join(unknown[:20])}")
                return True
            names = list(wanted)
        else:
            names = list(Node.objects.filter(Node.online_q(now)).order_by("name").values_list("name", flat=True))
        if sweep.kind == "preflight":
            master = params.get("master") or names[0] if names else None
            if master not in names:
                _fail(sweep, f"master: {master} is not one of the sweep's nodes")
                return True
            names = [master] + [n for n in names if n != master]
        try:
            plan = planner.plan(sweep.kind, names, [tuple(p) for p in params.get("pairs") or []])
        except planner.PlanError as exc:
            _fail(sweep, str(exc))
            return True
        node_ids = dict(Node.objects.filter(name__in=names).values_list("name", "pk"))
        batch = []
        for number, pairs in enumerate(plan.rounds, start=1):
            for a, b in pairs:
                batch.append(PairProbe(sweep=sweep, round=number, node_a_id=node_ids[a], node_b_id=node_ids[b],
                                       backend=sweep.backend))
            if len(batch) >= 5000:
                PairProbe.objects.bulk_create(batch)
                batch = []
        PairProbe.objects.bulk_create(batch)
        sweep.nodes = names
        sweep.total_rounds = len(plan.rounds) + (1 if plan.group else 0)
        sweep.params = {**params, "pair_rounds": len(plan.rounds), "group": plan.group}
        if sweep.kind in ("full", "pairs") or params.get("baseline"):
            sweep.baseline = resolve_baseline(params.get("baseline"))
        sweep.save(update_fields=["nodes", "total_rounds", "params", "baseline"])
        broadcast.sweep_update(sweep)
    advance(sweep_id)
    return True


def advance(sweep_id: int) -> None:
    """Start the next round if the current one is complete; finish the sweep after the last."""
    while True:
        with transaction.atomic():
            sweep = Sweep.objects.filter(pk=sweep_id, status="running").first()
            if sweep is None:
                return
            k = sweep.current_round
            if k and _round_open(sweep, k):
                return
            if k >= sweep.total_rounds:
                finish(sweep)
                return
            if not Sweep.objects.filter(pk=sweep_id, status="running", current_round=k).update(current_round=k + 1):
                return  # another worker advanced it
            sweep.current_round = k + 1
            still_open = _dispatch_round(sweep, k + 1)
        if still_open:
            return


def _round_open(sweep: Sweep, k: int) -> bool:
    if k <= sweep.params.get("pair_rounds", 0):
        return PairProbe.objects.filter(sweep=sweep, round=k, status__in=OPEN_PAIR_STATUSES).exists()
    return GroupProbe.objects.filter(sweep=sweep, status__in=OPEN_PAIR_STATUSES).exists()


def _dispatch_round(sweep: Sweep, k: int) -> bool:
    """Mark round k's probes running and send their commands after commit. True if any is open."""
    now = timezone.now()
    online = set(Node.objects.filter(Node.online_q(now), name__in=sweep.nodes).values_list("name", flat=True))
    if k > sweep.params.get("pair_rounds", 0):
        return _dispatch_group(sweep, online, now)
    kind = "discover" if sweep.kind in planner.DISCOVER_KINDS else "pair"
    settings_ = dispatch.probe_settings(sweep.params, sweep.last_stage, kind)
    wait = timedelta(seconds=dispatch.server_deadline_s(settings_["deadline_s"]))
    commands, updated = [], []
    probes = PairProbe.objects.filter(sweep=sweep, round=k, status="pending").select_related("node_a", "node_b")
    for probe in probes:
        a, b = probe.node_a, probe.node_b
        gone = [n.name for n in (a, b) if n.name not in online]
        if gone:
            probe.status, probe.reason, probe.finished = "offline", "agent_offline", now
            probe.hint = f"{' and '.join(gone)} offline when the round started (no recent heartbeat)"
        else:
            probe.status, probe.rendezvous, probe.started, probe.deadline = (
                "running", dispatch.new_rendezvous(), now, now + wait)
            commands += dispatch.build_commands(
                kind=kind, probe_id=probe.pk, sweep_id=sweep.pk, backend=sweep.backend,
                members=[(a.name, a.address), (b.name, b.address)], settings=settings_,
                rendezvous=probe.rendezvous, multi_group=bool(sweep.params.get("multi_group")))
        updated.append(probe)
    bulk.conditional_update(PairProbe, {p.pk: {"rendezvous": p.rendezvous} for p in updated if p.status == "running"},
                            where="t.status = %s", where_params=["pending"],
                            constants={"status": "running", "started": now, "deadline": now + wait})
    bulk.conditional_update(PairProbe, {p.pk: {"hint": p.hint} for p in updated if p.status == "offline"},
                            where="t.status = %s", where_params=["pending"],
                            constants={"status": "offline", "reason": "agent_offline", "finished": now})
    transaction.on_commit(lambda: [dispatch.send_command(c) for c in commands])
    from cluster_health.reports import pair_dict

    broadcast.sweep_update(sweep, [pair_dict(p) for p in updated], throttle=True)
    return any(p.status == "running" for p in updated)


def _dispatch_group(sweep: Sweep, online: set, now) -> bool:
    kind = "preflight" if sweep.kind == "preflight" else "group"
    members = [n for n in sweep.nodes if n in online] if kind == "group" else list(sweep.nodes)
    group = GroupProbe.objects.create(sweep=sweep, kind=kind, nodes=members, backend=sweep.backend,
                                      rendezvous=dispatch.new_rendezvous(), started=now)
    if kind == "group" and len(members) < 2:
        GroupProbe.objects.filter(pk=group.pk).update(status="skipped", finished=now,
                                                      hint="fewer than two nodes online for the group collective")
        return False
    offline = [n for n in members if n not in online]
    if offline:
        GroupProbe.objects.filter(pk=group.pk).update(
            status="offline", reason="agent_offline", finished=now,
            hint=f"{', '.join(offline[:10])} offline: rank(s) "
                 f"{', '.join(str(members.index(n)) for n in offline[:10])} would never join")
        return False
    addresses = dict(Node.objects.filter(name__in=members).values_list("name", "address"))
    last_stage = "collective" if kind == "preflight" else sweep.last_stage
    settings_ = dispatch.probe_settings(sweep.params, last_stage)
    commands = dispatch.build_commands(
        kind=kind, probe_id=group.pk, sweep_id=sweep.pk, backend=sweep.backend,
        members=[(n, addresses[n]) for n in members], settings=settings_, rendezvous=group.rendezvous,
        master_port=sweep.params.get("master_port") if kind == "preflight" else None,
        env=sweep.params.get("env"), multi_group=bool(sweep.params.get("multi_group")))
    deadline = now + timedelta(seconds=dispatch.server_deadline_s(settings_["deadline_s"]))
    GroupProbe.objects.filter(pk=group.pk).update(status="running", deadline=deadline)
    transaction.on_commit(lambda: [dispatch.send_command(c) for c in commands])
    broadcast.sweep_update(sweep)
    return True


def finish(sweep: Sweep) -> bool:
    """Compute findings and the verdict, and close the sweep (once)."""
    now = timezone.now()
    if not Sweep.objects.filter(pk=sweep.pk, status="running").update(status="finished", finished=now):
        return False
    pairs = [{"a": a, "b": b, "status": s, "stage": st, "reason": r, "hint": h}
             for a, b, s, st, r, h in PairProbe.objects.filter(sweep=sweep).values_list(
                 "node_a__name", "node_b__name", "status", "stage", "reason", "hint").iterator(chunk_size=10000)]
    nodes = Node.objects.filter(name__in=sweep.nodes)
    offline = {n.name for n in nodes if not n.is_online(now)}
    groups = list(GroupProbe.objects.filter(sweep=sweep))
    found = verdicts.culprit_findings(sweep.nodes, pairs, offline)
    found += verdicts.degraded_findings(pairs)
    for g in groups:
        if g.kind == "preflight":
            from cluster_health import preflight

            found += preflight.rank_findings(g.nodes, g.halves, g.status, g.reason, g.hint)
        else:
            found += verdicts.group_findings({"status": g.status, "stage": g.stage, "reason": g.reason,
                                              "hint": g.hint, "nodes": g.nodes})
    if sweep.kind in planner.DISCOVER_KINDS:
        found += _interface_findings(sweep, pairs, {n.name: n.address for n in nodes})
    if sweep.kind in ("full", "preflight", "group"):
        found += verdicts.consistency_findings({n.name: n.facts for n in nodes},
                                                {n.name: n.address for n in nodes})
    if sweep.kind == "preflight":
        from cluster_health import preflight

        found += preflight.setting_findings(sweep.params, {n.name: n.facts for n in nodes})
    statuses = [p["status"] for p in pairs] + [g.status for g in groups]
    verdict = verdicts.verdict(statuses, found)
    Finding.objects.bulk_create([Finding(sweep=sweep, **f) for f in found])
    Sweep.objects.filter(pk=sweep.pk).update(verdict=verdict)
    sweep.status, sweep.verdict, sweep.finished = "finished", verdict, now
    from cluster_health.reports import store_matrix

    store_matrix(sweep)
    broadcast.sweep_update(sweep)
    log.info("sweep %s finished: %s (%d findings)", sweep.pk, verdict, len(found))
    return True


def _interface_findings(sweep: Sweep, pairs: list[dict], addresses: dict[str, str]) -> list[dict]:
    peers: dict[str, set[str]] = {n: set() for n in sweep.nodes}
    for p in pairs:
        peers[p["a"]].add(p["b"])
        peers[p["b"]].add(p["a"])
    rows = [discovery.combination_rows(a, b)
            for a, b in PairProbe.objects.filter(sweep=sweep).values_list("half_a", "half_b").iterator(chunk_size=2000)]
    return discovery.interface_findings(rows, peers, addresses)


def cancel(sweep_id: int) -> bool:
    """Cancel an open sweep: open probes become skipped (reason cancelled); late results are ignored."""
    now = timezone.now()
    with transaction.atomic():
        if not Sweep.objects.filter(pk=sweep_id, status__in=Sweep.OPEN_STATUSES).update(
                status="cancelled", verdict="unknown", finished=now):
            return False
        for model in (PairProbe, GroupProbe):
            model.objects.filter(sweep_id=sweep_id, status__in=OPEN_PAIR_STATUSES).update(
                status="skipped", reason="cancelled", finished=now)
        broadcast.sweep_update(Sweep.objects.get(pk=sweep_id))
    return True


def stalled_sweeps(now=None) -> list[int]:
    """Running sweeps whose current round has nothing open: a lost advance the reaper re-runs."""
    out = []
    for sweep in Sweep.objects.filter(status="running").only("pk", "current_round", "params", "total_rounds"):
        if not _round_open(sweep, sweep.current_round) if sweep.current_round else True:
            out.append(sweep.pk)
    return out


def forgotten_pending(now=None, older_than_s: float = 30.0) -> list[int]:
    """Pending sweeps nobody started (the start task was lost); the reaper starts them."""
    cutoff = (now or timezone.now()) - timedelta(seconds=older_than_s)
    return list(Sweep.objects.filter(Q(status="pending") & Q(created__lt=cutoff)).values_list("pk", flat=True))

