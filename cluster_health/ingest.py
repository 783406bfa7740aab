"""Applying what agents send: probe results and heartbeats.

Every message is validated against the contract first. A message that fails,
or names an unknown probe, a node that is not part of it, or another sweep, is
kept as a RejectedMessage and logged; it never raises into the worker. Applying a
half is a conditional UPDATE (only while the probe is open and that half is
still empty), so a duplicate or a late result changes nothing. Halves are applied
in batches (``ingest_results``): one transaction, one broadcast and one advance
per sweep and batch, which is what lets one worker keep up with a 1,024-node sweep.
"""

from __future__ import annotations

import json
import logging
import traceback

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from agents import contract
from cluster_health import broadcast, bulk, merge, sweeps
from cluster_health.models import (
    OPEN_PAIR_STATUSES, BaselinePair, GroupProbe, Node, PairProbe, RejectedMessage, Sweep, pair_key,
)

log = logging.getLogger(__name__)

APPLIED, FINAL, DUPLICATE, LATE, REJECTED = "applied", "final", "duplicate", "late", "rejected"
TASK_RESULTS = "server.results"  # a list of halves; each is what contract.TASK_RESULT carries
BATCH = 1000  # halves per transaction


def _storable(payload):
    """The payload as stored JSON, or its repr when it is not valid JSON (NaN, odd types)."""
    try:
        json.dumps(payload, allow_nan=False)
    except (TypeError, ValueError):
        return {"raw": repr(payload)[:8000]}
    return payload if isinstance(payload, (dict, list)) else {"raw": payload}


def reject(task: str, payload, error: str, node: str = "") -> str:
    """Keep a message that cannot be applied, with the reason, and log it."""
    if not node and isinstance(payload, dict) and isinstance(payload.get("node"), str):
        node = payload["node"]
    RejectedMessage.objects.create(task=task, node=node[:100], error=error[:4000], payload=_storable(payload))
    log.warning("rejected %s from %r: %s", task, node, error)
    return REJECTED


def record_heartbeat(payload) -> str:
    """Register or refresh a node from its heartbeat (name, address, facts)."""
    try:
        hb = contract.validate_heartbeat(payload)
    except contract.ContractError as exc:
        return reject(contract.TASK_HEARTBEAT, payload, str(exc))
    Node.objects.update_or_create(
        name=hb["node"],
        defaults={"address": hb["address"], "facts": hb["facts"], "agent_version": hb["agent_version"] or "",
                  "busy": hb["busy"], "last_heartbeat": timezone.now()},
    )
    return APPLIED


def ingest_result(payload) -> str:
    """Apply one agent's half of a probe result; returns what happened (applied, final, duplicate, ...)."""
    return ingest_results([payload])[0]


def ingest_results(payloads: list) -> list[str]:
    """Apply many halves (from any probes and sweeps); returns one outcome per payload, in order.

    Pair halves are applied BATCH at a time in one transaction, each write conditional
    (only while the probe is open and that half is empty, so a duplicate in the same
    batch or a later one changes nothing): a pair with both halves in the batch is
    merged and written closed in one statement for all such pairs; any other half is
    claimed on its own and closes its pair when the other half is already stored (the
    claim returns it, so nothing is read twice). Browsers get one update per sweep and batch, and
    each touched sweep is advanced once, after the commit. If a batch fails, its
    halves are applied one at a time so that a poisoned message rejects only itself.
    """
    outcomes: list[str | None] = [None] * len(payloads)
    pairs: list[tuple[int, dict]] = []
    for i, payload in enumerate(payloads):
        try:
            result = contract.validate_result(payload)
        except contract.ContractError as exc:
            outcomes[i] = reject(contract.TASK_RESULT, payload, str(exc))
            continue
        if result["kind"] in ("pair", "discover"):  # a discover sweep's probes are pair probes
            pairs.append((i, result))
        else:
            outcomes[i] = _guarded(_ingest_group, result, payload)
    for start in range(0, len(pairs), BATCH):
        chunk = pairs[start: start + BATCH]
        try:
            got = _ingest_pairs([(result, payloads[i]) for i, result in chunk])
        except Exception:
            if len(chunk) == 1:
                i, result = chunk[0]
                got = [_ingest_error(result, payloads[i])]
            else:
                log.warning("ingest batch of %d failed; applying its halves one at a time", len(chunk),
                            exc_info=True)
                got = [_guarded(lambda r, p: _ingest_pairs([(r, p)])[0], result, payloads[i])
                       for i, result in chunk]
        for (i, _result), outcome in zip(chunk, got):
            outcomes[i] = outcome
    return outcomes



def _ingest_error(result: dict, payload) -> str:
    log.exception("ingest of probe %s failed", result.get("probe_id"))
    return reject(contract.TASK_RESULT, payload, "ingest error: " + traceback.format_exc(limit=3)[-3000:])


def _guarded(fn, result: dict, payload) -> str:
    try:
        return fn(result, payload)
    except Exception:  # keep the message and the reason, never lose it to a worker traceback
        return _ingest_error(result, payload)


_PROBE_FIELDS = ("id", "sweep_id", "round", "node_a__name", "node_b__name", "status", "sweep__baseline_id",
                 "started")
_OPEN = "t.status IN (%s, %s)"
_HALF = {0: "half_a", 1: "half_b"}


def _ingest_pairs(batch: list[tuple[dict, object]]) -> list[str]:
    outcomes: list[str | None] = []
    claims: dict[int, dict[int, int]] = {0: {}, 1: {}}  # rank -> probe id -> batch index
    with transaction.atomic():
        probes = {row[0]: row for row in PairProbe.objects.filter(
            pk__in={result["probe_id"] for result, _ in batch}).values_list(*_PROBE_FIELDS)}
        for index, (result, payload) in enumerate(batch):
            refused = _refuse_half(result, payload, probes.get(result["probe_id"]))
            if refused is None and result["probe_id"] in claims[result["rank"]]:
                refused = DUPLICATE  # the same half twice in one batch: the first one counts
            if refused is None:
                claims[result["rank"]][result["probe_id"]] = index
            outcomes.append(refused)
        now = timezone.now()
        # Both halves in this batch (the usual case: the two agents of a pair answer together):
        # halves and merged result in one write, on rows that are open with both halves empty.
        together = {pk: (claims[0][pk], claims[1][pk]) for pk in claims[0].keys() & claims[1].keys()}
        final = _final_rows(probes, {pk: (batch[a][0], batch[b][0]) for pk, (a, b) in together.items()}, now)
        closed_ids = set(bulk.update_returning(
            PairProbe, {pk: {"half_a": batch[a][0], "half_b": batch[b][0], **final[pk]}
                        for pk, (a, b) in together.items()},
            where=f"{_OPEN} AND t.half_a IS NULL AND t.half_b IS NULL", where_params=OPEN_PAIR_STATUSES,
            constants={"finished": now}))
        for pk in closed_ids:
            a, b = together[pk]
            outcomes[min(a, b)], outcomes[max(a, b)] = APPLIED, FINAL
        # Every other half is claimed on its own; a pair whose other half is already stored closes.
        complete: dict[int, tuple[dict, dict]] = {}
        last: dict[int, int] = {}  # probe id -> batch index of the half that completed it
        for rank, wanted in claims.items():
            field, other = _HALF[rank], _HALF[1 - rank]
            stored = bulk.update_returning(
                PairProbe, {pk: {field: batch[index][0]} for pk, index in wanted.items() if pk not in closed_ids},
                where=f"{_OPEN} AND t.{field} IS NULL", where_params=OPEN_PAIR_STATUSES, returning=(other,))
            for pk, index in wanted.items():
                if pk in closed_ids:
                    continue
                outcomes[index] = APPLIED if pk in stored else DUPLICATE
                if pk in stored and stored[pk][0] is not None:
                    mine = batch[index][0]
                    complete[pk] = (mine, stored[pk][0]) if rank == 0 else (stored[pk][0], mine)
                    last[pk] = index
        final.update(_final_rows(probes, complete, now))
        for pk in bulk.conditional_update(PairProbe, {pk: final[pk] for pk in complete}, where=_OPEN,
                                          where_params=OPEN_PAIR_STATUSES, constants={"finished": now}):
            outcomes[last[pk]] = FINAL
            closed_ids.add(pk)
        closed: dict[int, list[dict]] = {}
        for pk in closed_ids:
            _pk, sweep_id, rnd, a, b, *_rest = probes[pk]
            closed.setdefault(sweep_id, []).append(_closed_pair_dict(pk, rnd, a, b, final[pk]))
        for sweep_id, pair_dicts in closed.items():
            broadcast.sweep_update(Sweep(pk=sweep_id), pair_dicts, round_only=True)
    for sweep_id in closed:
        sweeps.advance(sweep_id)
    return outcomes


def _final_rows(probes: dict[int, tuple], halves: dict[int, tuple[dict, dict]], now) -> dict[int, dict]:
    """The final fields (all but ``finished``) of each pair from its two halves, judged against its baseline."""
    merged = {pk: merge.merge_halves(half_a, half_b) for pk, (half_a, half_b) in halves.items()}
    expected = _expected_busbw([(probes[pk], m) for pk, m in merged.items()])
    out = {}
    for pk, result in merged.items():
        _pk, _sweep, _round, a, b, _status, baseline_id, started = probes[pk]
        _degrade_below_baseline(result, expected.get((baseline_id, *pair_key(a, b))))
        out[pk] = _final_fields(result, started, now)
        del out[pk]["finished"]
    return out


def _refuse_half(result: dict, payload, probe: tuple | None) -> str | None:
    """Why a half cannot be stored (rejected, late), or None if it may be claimed."""
    if probe is None:
        return reject(contract.TASK_RESULT, payload, f"probe_id: no pair probe {result['probe_id']}")
    pk, sweep_id, _round, a, b, status, *_rest = probe
    if result["sweep_id"] is not None and result["sweep_id"] != sweep_id:
        return reject(contract.TASK_RESULT, payload,
                      f"sweep_id: probe {pk} belongs to sweep {sweep_id}, not {result['sweep_id']}")
    names = (a, b)
    if result["node"] not in names:
        return reject(contract.TASK_RESULT, payload, f"node: {result['node']} is not part of probe {pk} ({a}, {b})")
    if result["rank"] != names.index(result["node"]):
        return reject(contract.TASK_RESULT, payload,
                      f"rank: {result['node']} is rank {names.index(result['node'])} of probe {pk}, "
                      f"not {result['rank']}")
    if status not in OPEN_PAIR_STATUSES:
        log.info("late result for closed probe %s from %s ignored", pk, result["node"])
        return LATE
    return None


def _expected_busbw(closing: list[tuple[tuple, dict]]) -> dict[tuple[int, str, str], float]:
    """Baseline busbw for the pairs about to close ok, in one query per baseline."""
    wanted: dict[int, set[tuple[str, str]]] = {}
    for (_pk, _sweep, _round, a, b, _status, baseline_id, *_rest), merged in closing:
        if baseline_id and merged["status"] == "ok" and merged.get("busbw_gbps") is not None:
            wanted.setdefault(baseline_id, set()).add(pair_key(a, b))
    out = {}
    for baseline_id, keys in wanted.items():
        firsts = {k[0] for k in keys}
        rows = BaselinePair.objects.filter(baseline_id=baseline_id, node_a__in=firsts).values_list(
            "node_a", "node_b", "busbw_gbps")
        out.update({(baseline_id, na, nb): bw for na, nb, bw in rows if (na, nb) in keys})
    return out


def _degrade_below_baseline(merged: dict, expected: float | None) -> None:
    if merged["status"] == "ok" and merge.below_baseline(merged.get("busbw_gbps"), expected,
                                                         settings.DEGRADED_RATIO):
        merged.update(status="degraded", reason="below_baseline",
                      hint=f"busbw {merged['busbw_gbps']:.3g} GB/s is below {settings.DEGRADED_RATIO:g} x "
                           f"the baseline {expected:.3g} GB/s")


def _final_fields(merged: dict, started, now) -> dict:
    duration = merged.get("duration_s")
    if duration is None and started:
        duration = (now - started).total_seconds()
    return dict(
        status=merged["status"], stage=merged.get("stage"), reason=merged.get("reason"),
        hint=(merged.get("hint") or None) and merged["hint"][: contract.MAX_TEXT],
        latency_us_p50=merged.get("latency_us_p50"), latency_us_p99=merged.get("latency_us_p99"),
        sizes=merged.get("sizes") or [], algbw_gbps=merged.get("algbw_gbps"), busbw_gbps=merged.get("busbw_gbps"),
        finished=now, duration_s=duration,
    )


def _closed_pair_dict(pk: int, rnd: int, a: str, b: str, fields: dict) -> dict:
    """What browsers are sent about a pair that just closed."""
    from cluster_health.reports import pair_dict_from_values

    return pair_dict_from_values((pk, rnd, a, b, fields["status"], fields["stage"], fields["reason"],
                                  fields["latency_us_p50"], fields["algbw_gbps"], fields["busbw_gbps"],
                                  fields["hint"]))


def close_pair(probe: PairProbe, merged: dict, now=None) -> bool:
    """Write a pair's final result (once); the caller advances the sweep. False if already closed."""
    now = now or timezone.now()
    sweep = probe.sweep
    if sweep.baseline_id and merged["status"] == "ok":
        a, b = pair_key(probe.node_a.name, probe.node_b.name)
        expected = (BaselinePair.objects.filter(baseline_id=sweep.baseline_id, node_a=a, node_b=b)
                    .values_list("busbw_gbps", flat=True).first())
        _degrade_below_baseline(merged, expected)
    fields = _final_fields(merged, probe.started, now)
    updated = PairProbe.objects.filter(pk=probe.pk, status__in=OPEN_PAIR_STATUSES).update(**fields)
    if updated:
        broadcast.sweep_update(sweep, [_closed_pair_dict(probe.pk, probe.round, probe.node_a.name,
                                                         probe.node_b.name, fields)], round_only=True)
    return bool(updated)


def _ingest_group(result: dict, payload) -> str:
    with transaction.atomic():
        group = GroupProbe.objects.select_for_update().filter(pk=result["probe_id"]).first()
        if group is None or group.kind != result["kind"]:
            return reject(contract.TASK_RESULT, payload,
                          f"probe_id: no {result['kind']} probe {result['probe_id']}")
        if result["sweep_id"] is not None and result["sweep_id"] != group.sweep_id:
            return reject(contract.TASK_RESULT, payload,
                          f"sweep_id: probe {group.pk} belongs to sweep {group.sweep_id}, not {result['sweep_id']}")
        rank = result["rank"]
        if rank >= len(group.nodes) or group.nodes[rank] != result["node"]:
            return reject(contract.TASK_RESULT, payload,
                          f"rank: {result['node']} is not rank {rank} of group probe {group.pk}")
        if group.status not in OPEN_PAIR_STATUSES:
            return LATE
        if str(rank) in group.halves:
            return DUPLICATE
        group.halves[str(rank)] = result
        GroupProbe.objects.filter(pk=group.pk).update(halves=group.halves)
        if len(group.halves) < len(group.nodes):
            return APPLIED
        close_group(group, merge.merge_many(list(group.halves.values())))
    sweeps.advance(group.sweep_id)
    return FINAL


def close_group(group: GroupProbe, merged: dict, now=None) -> bool:
    now = now or timezone.now()
    updated = GroupProbe.objects.filter(pk=group.pk, status__in=OPEN_PAIR_STATUSES).update(
        status=merged["status"], stage=merged.get("stage"), reason=merged.get("reason"),
        hint=merged.get("hint"), latency_us_p50=merged.get("latency_us_p50"),
        busbw_gbps=merged.get("busbw_gbps"), finished=now)
    if updated:
        broadcast.sweep_update(group.sweep)
    return bool(updated)
