"""Applying what agents send: probe results and heartbeats.

Every message is validated against the contract first. A message that fails,
or names an unknown probe, a node that is not part of it, or another sweep, is
kept as a RejectedMessage and logged; it never raises into the worker. Applying a
half is a conditional UPDATE (only while the probe is open and that half is
still empty), so a duplicate or a late result changes nothing.
"""

from __future__ import annotations

import json
import logging
import traceback

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from agents import contract
from cluster_health import broadcast, merge, sweeps
from cluster_health.models import (
    OPEN_PAIR_STATUSES, BaselinePair, GroupProbe, Node, PairProbe, RejectedMessage, pair_key,
)

log = logging.getLogger(__name__)

APPLIED, FINAL, DUPLICATE, LATE, REJECTED = "applied", "final", "duplicate", "late", "rejected"


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
    try:
        result = contract.validate_result(payload)
    except contract.ContractError as exc:
        return reject(contract.TASK_RESULT, payload, str(exc))
    try:
        if result["kind"] == "pair":
            return _ingest_pair(result, payload)
        return _ingest_group(result, payload)
    except Exception:  # keep the message and the reason, never lose it to a worker traceback
        log.exception("ingest of probe %s failed", result.get("probe_id"))
        return reject(contract.TASK_RESULT, payload, "ingest error: " + traceback.format_exc(limit=3)[-3000:])


def _ingest_pair(result: dict, payload) -> str:
    with transaction.atomic():
        probe = (PairProbe.objects.select_related("sweep", "node_a", "node_b")
                 .filter(pk=result["probe_id"]).first())
        if probe is None:
            return reject(contract.TASK_RESULT, payload, f"probe_id: no pair probe {result['probe_id']}")
        if result["sweep_id"] is not None and result["sweep_id"] != probe.sweep_id:
            return reject(contract.TASK_RESULT, payload,
                          f"sweep_id: probe {probe.pk} belongs to sweep {probe.sweep_id}, not {result['sweep_id']}")
        names = (probe.node_a.name, probe.node_b.name)
        if result["node"] not in names:
            return reject(contract.TASK_RESULT, payload,
                          f"node: {result['node']} is not part of probe {probe.pk} ({names[0]}, {names[1]})")
        if result["rank"] != names.index(result["node"]):
            return reject(contract.TASK_RESULT, payload,
                          f"rank: {result['node']} is rank {names.index(result['node'])} of probe {probe.pk}, "
                          f"not {result['rank']}")
        if probe.status not in OPEN_PAIR_STATUSES:
            log.info("late result for closed probe %s from %s ignored", probe.pk, result["node"])
            return LATE
        field = "half_a" if result["rank"] == 0 else "half_b"
        claimed = PairProbe.objects.filter(pk=probe.pk, status__in=OPEN_PAIR_STATUSES,
                                           **{f"{field}__isnull": True}).update(**{field: result})
        if not claimed:
            return DUPLICATE
        probe.refresh_from_db(fields=["half_a", "half_b", "status"])
        if probe.half_a is None or probe.half_b is None:
            return APPLIED
        close_pair(probe, merge.merge_halves(probe.half_a, probe.half_b))
    sweeps.advance(probe.sweep_id)
    return FINAL


def close_pair(probe: PairProbe, merged: dict, now=None) -> bool:
    """Write a pair's final result (once); the caller advances the sweep. False if already closed."""
    now = now or timezone.now()
    sweep = probe.sweep
    if merged["status"] == "ok" and sweep.baseline_id and merged.get("busbw_gbps") is not None:
        a, b = pair_key(probe.node_a.name, probe.node_b.name)
        expected = (BaselinePair.objects.filter(baseline_id=sweep.baseline_id, node_a=a, node_b=b)
                    .values_list("busbw_gbps", flat=True).first())
        if merge.below_baseline(merged["busbw_gbps"], expected, settings.DEGRADED_RATIO):
            merged.update(status="degraded", reason="below_baseline",
                          hint=f"busbw {merged['busbw_gbps']:.3g} GB/s is below {settings.DEGRADED_RATIO:g} x "
                               f"the baseline {expected:.3g} GB/s")
    duration = merged.get("duration_s")
    if duration is None and probe.started:
        duration = (now - probe.started).total_seconds()
    sizes = merged.get("sizes") or []
    updated = PairProbe.objects.filter(pk=probe.pk, status__in=OPEN_PAIR_STATUSES).update(
        status=merged["status"], stage=merged.get("stage"), reason=merged.get("reason"),
        hint=(merged.get("hint") or None) and merged["hint"][: contract.MAX_TEXT],
        latency_us_p50=merged.get("latency_us_p50"), latency_us_p99=merged.get("latency_us_p99"),
        sizes=sizes, algbw_gbps=merged.get("algbw_gbps"), busbw_gbps=merged.get("busbw_gbps"),
        finished=now, duration_s=duration,
    )
    if updated:
        probe.refresh_from_db()
        from cluster_health.reports import pair_dict

        broadcast.sweep_update(sweep, [pair_dict(probe)], round_only=True)
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
