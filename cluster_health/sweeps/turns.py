"""Whose turn a node's single command slot is: a running sweep's probes, or a hang diagnosis's inspect.

An agent runs one command at a time. A probe must start within ``dispatch.START_GRACE_S`` of being
sent, and an inspect holds the slot for its sampling interval plus the helper's time (up to
``HELPER_TIMEOUT_S``), so the two never share a node: a sweep does not start over a node whose
inspect is in flight (it queues, as behind a running sweep), and a diagnosis holds back the inspect
of a node a running sweep covers until that sweep ends (``hang_diagnoses``). Both decide under
``claim``, the lock that serializes sweep starts, so neither misses the other.
"""

from __future__ import annotations

import time
from datetime import timedelta

from django.db import connection
from django.db.models import Q
from django.utils import timezone

from agents.hangs.inspect import HELPER_TIMEOUT_S, REQUEST_TIMEOUT_S
from cluster_health.models import HangDiagnosis, HangReport, Sweep
from cluster_health.queues import dispatch

START_LOCK = 0x63685F7374617274  # the advisory lock that serializes sweep starts (PostgreSQL)
# The longest an inspect can hold its node after it was sent: waiting to start, then the agent's wait on
# the helper. A node is held until its report arrives, or this long when none does (a dead agent).
INSPECT_HOLD_S = dispatch.START_GRACE_S + REQUEST_TIMEOUT_S + HELPER_TIMEOUT_S


def claim() -> None:
    """Serialize, for this transaction, whoever hands out nodes' command slots (sweep starts, diagnoses'
    inspects): PostgreSQL's advisory lock. On SQLite the caller writes first: one writing transaction
    runs at a time from its first write on."""
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(%s)", [START_LOCK])


def sweeping(names: list[str]) -> dict[str, int]:
    """Each of ``names`` that a running sweep covers, with that sweep's id (the oldest, if several)."""
    wanted, out = set(names), dict[str, int]()
    for pk, nodes in Sweep.objects.filter(status="running").order_by("pk").values_list("pk", "nodes"):
        for node in wanted.intersection(nodes or ()):
            out.setdefault(node, pk)
    return out


def inspected(names: list[str], excluding: int | None = None) -> dict[str, int]:
    """Each of ``names`` with an inspect in flight (sent, not yet answered, sent less than
    ``INSPECT_HOLD_S`` ago), with that diagnosis's id (the oldest, if several)."""
    now = time.time()
    since = timezone.now() - timedelta(seconds=INSPECT_HOLD_S)
    wanted, out = set(names), dict[str, int]()
    open_ = HangDiagnosis.objects.filter(Q(finished__isnull=True) | Q(finished__gte=since)).exclude(pk=excluding)
    for pk, nodes, inspects in open_.order_by("pk").values_list("pk", "nodes", "inspects"):
        held = {
            node
            for node in wanted.intersection(nodes or ())
            if node not in out and now - ((inspects or {}).get(node) or {}).get("sent", 0) < INSPECT_HOLD_S
        }
        if held:
            held -= set(HangReport.objects.filter(diagnosis_id=pk).values_list("node", flat=True))
            out.update(dict.fromkeys(held, pk))
    return out


def inspecting(names: list[str]) -> list[int]:
    """The diagnoses with an inspect in flight on any of ``names``."""
    return sorted(set(inspected(names).values()))
