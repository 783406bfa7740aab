"""Probe commands that a round committed but never sent, sent again.

A round's probes are marked running in the transaction that opens the round, and
their commands go out after the commit; the rows are then marked sent
(``dispatch.send_probe_commands``). A server worker killed outright in between
(SIGKILL, out of memory, its host lost) leaves probes running that no agent was
told about: without this, they would wait out their deadline and close ``timeout``,
blamed on nodes that did nothing wrong.

The reaper calls ``resend_unsent``: a probe still running and unsent UNSENT_GRACE_S
after it started gets its commands rebuilt from its row (same probe id and
rendezvous), a fresh deadline, and is sent. If the kill came after the publish and
before the mark, the agents get the command twice; an agent runs a probe id, rank and
rendezvous once (``agents.worker``), so the second copy is dropped. If it came in the
middle of the publish, one agent may have run its half alone: that half failed at its
rendezvous, its peer's half fails the same way, and the pair reads as failed with both
halves saying the peer never arrived.
"""

from __future__ import annotations

import logging
from datetime import timedelta

from django.db import transaction

from cluster_health.models import GroupProbe, PairProbe
from cluster_health.queues import dispatch
from cluster_health.sweeps import gpus, rounds

log = logging.getLogger(__name__)

# How long after a round's commit its publish may still be under way. Publishing a
# 1,024-node round takes well under a second; past this the worker that was to send it
# is taken to be gone. Sending early costs only a duplicate that agents drop.
UNSENT_GRACE_S = 5.0


def resend_unsent(now) -> int:
    """Send the commands of probes committed running but never marked sent; returns how many probes."""
    cutoff = now - timedelta(seconds=UNSENT_GRACE_S)
    pairs = list(
        PairProbe.objects.filter(status="running", sent_at__isnull=True, started__lt=cutoff).select_related(
            "sweep", "node_a", "node_b"
        )
    )
    groups = list(
        GroupProbe.objects.filter(status="running", sent_at__isnull=True, started__lt=cutoff).select_related("sweep")
    )
    by_sweep: dict[int, list[PairProbe]] = {}
    for probe in pairs:
        by_sweep.setdefault(probe.sweep_id, []).append(probe)
    resent = sum(_resend_pairs(now, probes) for _, probes in sorted(by_sweep.items()))
    for group in groups:
        resent += _resend_group(now, group)
    resent += gpus.resend_unsent(now, cutoff)
    if resent:
        log.warning(
            "sent again the commands of %d probe(s) committed but never sent (a worker died in between)", resent
        )
    return resent


def _resend_pairs(now, probes: list[PairProbe]) -> int:
    sweep = probes[0].sweep
    kind, settings_ = rounds.pair_settings(sweep)
    deadline = now + timedelta(seconds=dispatch.server_deadline_s(settings_["deadline_s"]))
    with transaction.atomic():
        # Claim them: a concurrent ingest or another reaper may have closed or sent some meanwhile.
        pks = list(
            PairProbe.objects.select_for_update()
            .filter(pk__in=[p.pk for p in probes], status="running", sent_at__isnull=True)
            .values_list("pk", flat=True)
        )
        PairProbe.objects.filter(pk__in=pks).update(started=now, deadline=deadline)
        claimed = set(pks)
        commands = [c for p in probes if p.pk in claimed for c in rounds.pair_commands(sweep, p, kind, settings_)]
        transaction.on_commit(lambda: dispatch.send_probe_commands(PairProbe, pks, commands))
    return len(pks)


def _resend_group(now, group: GroupProbe) -> int:
    commands, wait_s = rounds.group_commands(group.sweep, group)
    with transaction.atomic():
        claimed = GroupProbe.objects.filter(pk=group.pk, status="running", sent_at__isnull=True).update(
            started=now, deadline=now + timedelta(seconds=wait_s)
        )
        if claimed:
            transaction.on_commit(lambda: dispatch.send_probe_commands(GroupProbe, [group.pk], commands))
    return claimed
