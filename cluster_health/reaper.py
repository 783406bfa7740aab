"""The reaper: turns silence into results so that no sweep ever stalls.

Run by beat every REAPER_INTERVAL_S, and callable inline (tests, ``sweep --wait``).
Open probes with a node whose heartbeats stopped become ``offline`` once the peer's
half is in (or the peer is silent too); open probes
past their deadline become ``timeout`` (keeping what the half that did arrive
said). Then sweeps whose current round is complete are advanced, which repairs
an advance lost with a worker. Every close is a conditional UPDATE, so the
reaper racing ingest closes a probe once.
"""

from __future__ import annotations

import logging

import redis
from django.conf import settings
from django.db.models import Q
from django.utils import timezone

from agents import contract
from cluster_health import ingest, merge, sweeps
from cluster_health.models import GroupProbe, Node, PairProbe

log = logging.getLogger(__name__)


def server_backlog() -> int | None:
    """Messages waiting on the server queue, or None when the broker cannot be asked."""
    client = redis.Redis.from_url(settings.REDIS_URL, socket_connect_timeout=2, socket_timeout=2)
    try:
        return client.llen(contract.SERVER_QUEUE)
    except redis.RedisError:
        return None
    finally:
        client.close()


def reap(now=None, judge_silence: bool | None = None) -> dict:
    """Close what is overdue or offline and advance sweeps; returns counts of what it did.

    A node is only judged silent while the server queue is drained: heartbeats waiting
    there (a server worker that was down, a broker backlog) are not silence, and reading
    them as such would close healthy pairs `offline`. Deadlines apply regardless.
    """
    now = now or timezone.now()
    if judge_silence is None:
        judge_silence = server_backlog() == 0
    cutoff = Node.online_cutoff(now)
    silent = Q(last_heartbeat__lt=cutoff) | Q(last_heartbeat__isnull=True)
    offline_ids = set(Node.objects.filter(silent).values_list("pk", flat=True)) if judge_silence else set()
    counts = {"timeout": 0, "offline": 0, "groups": 0, "advanced": 0, "started": 0}
    # A node gone mid-probe closes its pair early only once the peer has spoken (or is gone too):
    # the live peer's half, due by its deadline, says where the probe broke.
    peer_a_done = Q(half_a__isnull=False) | Q(node_a_id__in=offline_ids)
    peer_b_done = Q(half_b__isnull=False) | Q(node_b_id__in=offline_ids)
    due = PairProbe.objects.filter(status="running").filter(
        Q(deadline__lt=now) | Q(node_a_id__in=offline_ids, half_a__isnull=True) & peer_b_done
        | Q(node_b_id__in=offline_ids, half_b__isnull=True) & peer_a_done
    ).select_related("sweep", "node_a", "node_b")
    touched = set()
    for probe in due:
        merged = merge.close_unanswered(
            probe.half_a, probe.half_b, (probe.node_a.name, probe.node_b.name),
            offline=(probe.node_a_id in offline_ids, probe.node_b_id in offline_ids),
            deadline_s=(probe.deadline - probe.started).total_seconds() if probe.started else None)
        if ingest.close_pair(probe, merged, now):
            counts[merged["status"]] = counts.get(merged["status"], 0) + 1
            touched.add(probe.sweep_id)
    offline_names = set(Node.objects.filter(pk__in=offline_ids).values_list("name", flat=True))
    for group in GroupProbe.objects.filter(status="running").select_related("sweep"):
        missing = [n for r, n in enumerate(group.nodes) if str(r) not in group.halves]
        gone = [n for n in missing if n in offline_names]
        if not gone and (group.deadline is None or group.deadline >= now):
            continue
        arrived = list(group.halves.values())
        if gone:
            merged = {"status": "offline", "reason": "agent_offline", "stage": None,
                      "hint": f"{', '.join(gone[:10])} went offline during the group collective"}
        else:
            failed = [h for h in arrived if h["status"] not in ("ok", "degraded", "skipped")]
            worst = merge.merge_many(failed) if failed else {}
            ranks = ", ".join(str(group.nodes.index(n)) for n in missing[:10])
            merged = {"status": "timeout", "stage": worst.get("stage"),
                      "reason": worst.get("reason") or "probe_crashed",
                      "hint": worst.get("hint") or f"rank(s) {ranks} ({', '.join(missing[:10])}) sent no result"}
        if ingest.close_group(group, merged, now):
            counts["groups"] += 1
            touched.add(group.sweep_id)
    for sweep_id in set(sweeps.stalled_sweeps(now)) | touched:
        sweeps.advance(sweep_id)
        counts["advanced"] += 1
    for sweep_id in sweeps.forgotten_pending(now):
        if sweeps.start_sweep(sweep_id):
            counts["started"] += 1
    if any(counts[k] for k in ("timeout", "offline", "groups", "started")):
        log.info("reaper: %s", counts)
    return counts

