"""A sweep's node matrix and group matrix as pages and the API read them, closed or open.

A closed sweep's matrix no longer changes: ``finish`` stores it (a SweepMatrix row
with ``open_round`` None) and every read sends that text as it is.

An open sweep's matrix changes with every pair that closes. Built from its rows on
every read, a 1,024-node sweep's (523,776 rows) took 1.6 s on an idle machine and 3 to
4.5 s while the sweep was being ingested (docs/BENCHMARKS.md). So a large open sweep
is read from a snapshot and the rows that moved since:

- Rounds are a barrier: round k starts only once every pair of the rounds before it
  is final (sweeps/lifecycle.advance), and a final pair is never written again. A
  matrix built while round k was current is exact for every round before k; only
  rows of round k and later can have changed since.
- The snapshot is that matrix, kept in the sweep's SweepMatrix row with
  ``open_round`` = k and ``open_total`` = the sweep's total_rounds then (a bisect
  sweep plans more rounds as it goes).
- A read applies over it the rows of rounds k to the current one, and of any round
  planned since, in round order: a few thousand rows at 1,024 nodes, by the
  (sweep, round, status) index.
- The reaper makes the snapshot and brings it forward (``refresh_open``) whenever
  about REFRESH_PAIRS rows have been written past it, off the ingest path. Without
  the reaper a read is still exact, only slower.
- Each web process holds the matrix of its last read of a sweep, with the round that
  was current then, in memory (HELD_SWEEPS sweeps). That is a snapshot too, by the
  same argument, and a newer one: the next read applies over a copy of it the rows of
  the rounds since, about one round's worth (512 rows at 1,024 nodes), where the stored
  snapshot has up to REFRESH_PAIRS rows behind it, and neither reads nor decodes the
  stored 6 MB. It is keyed by the sweep's id and creation time, so a sweep id met again
  (a restored database) never matches, and dropped once the sweep is read closed.

Sweeps over fewer than SNAPSHOT_MIN_NODES nodes are built from their rows on every
read: 8,128 rows at 128 nodes take tens of milliseconds.
"""

from __future__ import annotations

import json
import logging
import threading
from collections import OrderedDict
from collections.abc import Iterable, Iterator
from datetime import datetime
from typing import NamedTuple

from django.conf import settings
from django.db.models import Q
from django.utils import timezone

from cluster_health.core import groupmatrix, matrix
from cluster_health.models import Node, PairProbe, Sweep, SweepMatrix
from cluster_health.nodes import sweep_grouping, sweep_groups
from cluster_health.shapes.pairs import READ_CHUNK, gbps, micros, pair_dict

log = logging.getLogger(__name__)

SNAPSHOT_MIN_NODES = 128  # open sweeps over fewer nodes are built from their rows on every read
REFRESH_PAIRS = 16384  # the reaper brings a snapshot forward once about this many rows were written past it
HELD_SWEEPS = 2  # open sweeps whose last-read matrix a web process keeps (about 5 MB each at 1,024 nodes)
# The pair fields a matrix holds, in core.matrix.MatrixRow order (the nodes by id, named on read).
MATRIX_FIELDS = ("node_a_id", "node_b_id", "status", "busbw_gbps", "latency_us_p50", "stage", "reason", "hint")


def _text(payload: dict) -> str:
    return json.dumps(payload, separators=(",", ":"))


def _named(rows: Iterable[tuple], names: dict[int, str]) -> Iterator[matrix.MatrixRow]:
    """Pair rows (MATRIX_FIELDS) as matrix rows: nodes by name, numbers rounded as the sweep JSON rounds them."""
    for a, b, st, bw, lat, stage, reason, hint in rows:
        yield (
            names.get(a),
            names.get(b),
            st,
            gbps(bw),
            micros(lat),
            stage,
            reason,
            hint,
        )


def closed_text(sweep_id: int) -> str | None:
    """The stored matrix of a closed sweep (never an open sweep's snapshot), or None."""
    return (
        SweepMatrix.objects.filter(sweep_id=sweep_id, open_round__isnull=True).values_list("payload", flat=True).first()
    )


def collapsed_pairs(sweep: Sweep) -> Iterator[dict]:
    """The passing pairs of a collapsed sweep, from its stored matrix: no probe id, round or evidence kept.

    A pair probe is two ranks, so its algbw is its busbw; a and b are in matrix (name) order.
    """
    stored = closed_text(sweep.pk)
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
                bw = None if busbw[k] != busbw[k] else busbw[k]
                yield pair_dict(
                    {
                        "id": None,
                        "round": None,
                        "a": names[i],
                        "b": names[j],
                        "status": "ok",
                        "stage": sweep.last_stage,
                        "reason": None,
                        "latency_us_p50": None if latency[k] != latency[k] else latency[k],
                        "algbw_gbps": bw,
                        "busbw_gbps": bw,
                        "hint": None,
                        "evidence": None,
                    }
                )
            k += 1


def matrix_text(sweep: Sweep) -> str:
    """The sweep's matrix payload (cluster_health.core.matrix) as JSON text.

    A closed sweep's is stored on first use (``finish`` stores it as the sweep ends) and
    read back as text from then on; an open sweep's comes from ``_open_arrays``.
    """
    if sweep.is_open:
        return _open_arrays(sweep).text()
    _let_go(sweep.pk)
    stored = closed_text(sweep.pk)
    if stored is not None:
        return stored
    text = sweep_matrix_arrays(sweep).text()
    # In place of an open snapshot, if one was left (a sweep cancelled or failed while open).
    SweepMatrix.objects.update_or_create(
        sweep_id=sweep.pk,
        defaults={"payload": text, "groups": "", "open_round": None, "open_total": None, "built": timezone.now()},
    )
    return text


def store_matrix(sweep: Sweep) -> None:
    """Store a closed sweep's matrix and group matrix now (replacing any stored), so its first reader does not wait.

    Never for a collapsed sweep: its matrix holds the passing pairs whose rows are gone.
    """
    if sweep.collapsed_ok:
        return
    arrays = sweep_matrix_arrays(sweep)
    SweepMatrix.objects.update_or_create(
        sweep_id=sweep.pk,
        defaults={
            "payload": arrays.text(),
            "groups": build_group_text(sweep, arrays),
            "open_round": None,
            "open_total": None,
            "built": timezone.now(),
        },
    )


def sweep_matrix_arrays(sweep: Sweep, only: list[str] | None = None) -> matrix.MatrixArrays:
    """The sweep's matrix from its pair rows, over all its nodes or ``only`` those named (a drill-down)."""
    named = only if only is not None else sweep.nodes
    names = dict(Node.objects.filter(name__in=named).values_list("pk", "name")) if named else {}
    # In round order: a pair looked at again (the confirmation pass, a bisect phase) shows its later look, as
    # an open sweep's read applies the rounds since its snapshot. Without an order PostgreSQL returns rows as
    # they lie on disk, where an updated first look can come after the second.
    rows = PairProbe.objects.filter(sweep=sweep).order_by("round")
    if only is not None:
        rows = rows.filter(node_a_id__in=list(names), node_b_id__in=list(names))
    rows = rows.values_list(*MATRIX_FIELDS)
    if not named:  # never planned, or planned before nodes were kept: name them from the rows
        names = dict(Node.objects.filter(pk__in={i for r in rows for i in r[:2]}).values_list("pk", "name"))
    return matrix.build_matrix_arrays(
        (names.values() if not sweep.nodes else sweep.nodes) if only is None else only,
        _named(rows.iterator(chunk_size=READ_CHUNK), names),
    )


def sweep_arrays(sweep: Sweep) -> matrix.MatrixArrays:
    """The sweep's matrix as arrays, not to be changed: an open sweep's as it stands, a closed one's as stored."""
    return _open_arrays(sweep) if sweep.is_open else matrix.MatrixArrays.of_payload(json.loads(matrix_text(sweep)))


def _snapshotted(sweep: Sweep) -> bool:
    return len(sweep.nodes or ()) >= SNAPSHOT_MIN_NODES


class _Held(NamedTuple):
    """A matrix this process built while round ``since`` (of ``total``) was current; never changed once held."""

    created: datetime
    arrays: matrix.MatrixArrays
    since: int
    total: int


_held: OrderedDict[int, _Held] = OrderedDict()  # sweep id -> its last read matrix, least recently read first
_held_lock = threading.Lock()  # the web server reads from several threads


def _holding(sweep: Sweep) -> _Held | None:
    with _held_lock:
        held = _held.get(sweep.pk)
        if held is not None and held.created != sweep.created:
            del _held[sweep.pk]
            return None
        return held


def _hold(sweep: Sweep, arrays: matrix.MatrixArrays, since: int, total: int) -> None:
    """Keep ``arrays`` as this process's snapshot of the sweep, unless a newer one is held already."""
    with _held_lock:
        held = _held.get(sweep.pk)
        if held is not None and held.created == sweep.created and (held.since, held.total) > (since, total):
            return
        _held[sweep.pk] = _Held(sweep.created, arrays, since, total)
        _held.move_to_end(sweep.pk)
        while len(_held) > HELD_SWEEPS:
            _held.popitem(last=False)


def _let_go(sweep_id: int) -> None:
    with _held_lock:
        _held.pop(sweep_id, None)


def _open_arrays(sweep: Sweep) -> matrix.MatrixArrays:
    """An open sweep's matrix as it stands: a snapshot and the rows since, or (small sweeps) its rows.

    The snapshot is this process's last read of the sweep when it holds one, else the
    stored one (taken now if there is none). The matrix returned is held as the next
    read's snapshot: every round before the current one was final when the sweep was read.
    """
    if not _snapshotted(sweep):
        return sweep_matrix_arrays(sweep)
    current, planned = sweep.current_round, sweep.total_rounds  # read before the rows
    held = _holding(sweep)
    if held is not None:
        base, since, total = held.arrays.copy(), held.since, held.total
    else:
        snapshot = (
            SweepMatrix.objects.filter(sweep_id=sweep.pk, open_round__isnull=False)
            .values_list("payload", "open_round", "open_total")
            .first()
        )
        if snapshot is None:
            arrays = _take_snapshot(sweep)[0]
            _hold(sweep, arrays, current, planned)
            return arrays
        payload, since, total = snapshot
        base = matrix.MatrixArrays.of_payload(json.loads(payload))
    arrays = base.apply(_rows_since(sweep.pk, since, total, current))
    _hold(sweep, arrays, max(since, current), max(total, planned))
    return arrays


def _rows_since(sweep_id: int, since: int, total: int, current: int) -> Iterator[matrix.MatrixRow]:
    """The rows a snapshot taken while round ``since`` was current (of ``total`` rounds) may lack, in round order."""
    moved = Q(round__gte=since, round__lte=max(since, current)) | Q(round__gt=total)
    rows = list(PairProbe.objects.filter(sweep_id=sweep_id).filter(moved).order_by("round").values_list(*MATRIX_FIELDS))
    ids = {i for row in rows for i in row[:2]}
    names = dict(Node.objects.filter(pk__in=ids).values_list("pk", "name")) if ids else {}
    return _named(rows, names)


def _take_snapshot(sweep: Sweep) -> tuple[matrix.MatrixArrays, bool]:
    """Build the open sweep's matrix from its rows and keep it as its snapshot; (the matrix, whether it was kept).

    The round and total are the ones ``sweep`` was read with, before its rows: every round
    before that one was final by then.
    """
    since, total = sweep.current_round, sweep.total_rounds
    arrays = sweep_matrix_arrays(sweep)
    return arrays, _keep(sweep.pk, arrays, since, total)


def _keep(sweep_id: int, arrays: matrix.MatrixArrays, since: int, total: int) -> bool:
    """Store an open snapshot unless a newer one, or the closed sweep's matrix, is stored already."""
    fields = {"payload": arrays.text(), "open_round": since, "open_total": total, "built": timezone.now()}
    older = Q(open_round__lt=since) | Q(open_round=since, open_total__lt=total)
    if SweepMatrix.objects.filter(older, sweep_id=sweep_id).update(**fields):
        return True
    SweepMatrix.objects.bulk_create([SweepMatrix(sweep_id=sweep_id, **fields)], ignore_conflicts=True)
    return SweepMatrix.objects.filter(sweep_id=sweep_id, open_round=since, open_total=total).exists()


def refresh_open() -> int:
    """The reaper's part: make or bring forward the snapshot of each large running sweep; returns those written.

    A snapshot is brought forward once about REFRESH_PAIRS rows were written past it, so
    a read applies at most that many rows; a failure leaves the old one, still exact.
    """
    written = 0
    for sweep in Sweep.objects.filter(status="running").only("pk", "nodes", "current_round", "total_rounds"):
        if not _snapshotted(sweep):
            continue
        stored = SweepMatrix.objects.filter(sweep_id=sweep.pk).values_list("open_round", "open_total").first()
        if stored is None:
            written += _take_snapshot(sweep)[1]
            continue
        since, total = stored
        if since is None:  # the closed matrix: the sweep finished after it was read as running
            continue
        rounds_apart = max(1, REFRESH_PAIRS // max(1, len(sweep.nodes) // 2))
        if sweep.current_round - since >= rounds_apart or total != sweep.total_rounds:
            now_round, now_total = sweep.current_round, sweep.total_rounds
            arrays = _open_arrays(sweep)  # read after the round it is kept for
            written += _keep(sweep.pk, arrays, now_round, now_total)
    if written:
        log.info("open sweep matrices brought forward: %d", written)
    return written


def build_group_text(sweep: Sweep, arrays: matrix.MatrixArrays) -> str:
    """The group matrix of a sweep's node matrix as JSON text (or, past groupmatrix.MAX_GROUPS, what to do)."""
    group_of, origin = sweep_grouping(sweep, arrays.nodes)
    head = {
        "sweep": sweep.pk,
        "grouping": "planned" if sweep.kind == "topology" else "current",
        "origin": origin,  # declared, measured, from the names: said on the view
    }
    try:
        payload = groupmatrix.build(arrays, group_of)
    except groupmatrix.TooManyGroups as exc:
        payload = {"groups": None, "nodes": len(arrays.nodes), "message": str(exc)}
    return _text({**head, **payload})


def has_groups(sweep: Sweep) -> bool:
    """Whether the sweep's nodes fall into groups worth a group matrix: at least two, one with several nodes.

    A fleet without topology (every name "host<N>", one group "host"; or names without a shared
    stem, each its own group) has none: its one cell would stand for the whole fleet.
    """
    nodes = list(sweep.nodes)
    distinct = len(set(sweep_groups(sweep, nodes).values())) if nodes else 0
    return 2 <= distinct < len(nodes)


def group_matrix_text(sweep: Sweep) -> str:
    """The sweep's group matrix (cluster_health.core.groupmatrix) as JSON text.

    A closed sweep's is stored beside its matrix, grouped as the nodes were when it
    was first read; an open sweep's is built from its matrix (``_open_arrays``) on every call.
    """
    if sweep.is_open:
        return build_group_text(sweep, _open_arrays(sweep))
    stored = (
        SweepMatrix.objects.filter(sweep_id=sweep.pk, open_round__isnull=True).values_list("groups", flat=True).first()
    )
    if stored:
        return stored
    text = build_group_text(sweep, sweep_arrays(sweep))
    SweepMatrix.objects.filter(sweep_id=sweep.pk, open_round__isnull=True).update(groups=text)
    return text


class DrillDownError(ValueError):
    """A drill-down that names no group of the sweep (status 404), or one too large to draw (400)."""

    def __init__(self, message: str, status: int = 400):
        super().__init__(message)
        self.status = status


def drill_down_text(sweep: Sweep, wanted: list[str]) -> str:
    """The node matrix over the members of one or two of the sweep's groups, as JSON text."""
    nodes = list(sweep.nodes) or sweep_arrays(sweep).nodes
    group_of = sweep_groups(sweep, nodes)
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
        arrays = sweep_arrays(sweep).restricted(members)
    else:
        arrays = sweep_matrix_arrays(sweep, only=members)
    member_groups = [group_of.get(n) or n for n in arrays.nodes]
    return _text({"sweep": sweep.pk, "groups": wanted, "member_groups": member_groups, **arrays.payload()})


def node_matrix_shown(sweep: Sweep) -> bool:
    """Whether pages draw the sweep's node matrix (else its group matrix): CLUSTER_HEALTH_NODE_MATRIX_MAX_NODES."""
    return len(sweep.nodes or ()) <= settings.NODE_MATRIX_MAX_NODES
