"""Applying probe halves that agents send.

Every message is validated against the contract first. A message that fails,
or names an unknown probe, a node that is not part of it, or another sweep, is
kept as a RejectedMessage and logged; it never raises into the worker. Applying a
half is a conditional UPDATE (only while the probe is open and that half is
still empty), so a duplicate or a late result changes nothing. Halves are applied
in batches (``ingest_results``): one transaction, one broadcast and one advance
per sweep and batch. A pair that is complete closes through ``sweeps.closing``,
the same path the reaper takes.
"""

from __future__ import annotations

import logging
import traceback

from django.db import InterfaceError, OperationalError, transaction
from django.utils import timezone

from agents import contract
from cluster_health import bulk
from cluster_health.core import merge
from cluster_health.ingest import gpus, groups
from cluster_health.ingest.outcomes import APPLIED, DUPLICATE, FINAL, LATE
from cluster_health.ingest.rejects import other_sweep, reject
from cluster_health.models import OPEN_PAIR_STATUSES, PairProbe
from cluster_health.sweeps import closing, lifecycle
from cluster_health.sweeps.closing import OPEN_WHERE, ProbeRow

log = logging.getLogger(__name__)

BATCH = 1000  # halves per transaction
# The database out of reach (a failover, a restart, SQLite busy): raised, never read as the half's fault.
TRANSIENT = (OperationalError, InterfaceError)
_HALF = {0: "half_a", 1: "half_b"}


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
    outcomes: list[str] = [""] * len(payloads)  # every slot is set below
    pairs: list[tuple[int, dict]] = []
    for i, payload in enumerate(payloads):
        if gpus.is_gpu_result(payload):  # a node's gpu check: its own contract and row
            outcomes[i] = _guarded(lambda _r, p: gpus.ingest_gpu_result(p), payload, payload)
            continue
        try:
            result = contract.validate_result(payload)
        except contract.ContractError as exc:
            outcomes[i] = reject(contract.TASK_RESULT, payload, str(exc))
            continue
        if result["kind"] in ("pair", "discover"):  # a discover sweep's probes are pair probes
            pairs.append((i, result))
        else:
            outcomes[i] = _guarded(groups.ingest_group, result, payload)
    for start in range(0, len(pairs), BATCH):
        chunk = pairs[start : start + BATCH]
        try:
            got = _ingest_pairs([(result, payloads[i]) for i, result in chunk])
        except TRANSIENT:
            raise  # the database out of reach is no half's fault: the batch is applied again later
        except Exception:
            if len(chunk) == 1:
                i, result = chunk[0]
                got = [_ingest_error(result, payloads[i])]
            else:
                log.warning("ingest batch of %d failed; applying its halves one at a time", len(chunk), exc_info=True)
                got = [_guarded(lambda r, p: _ingest_pairs([(r, p)])[0], result, payloads[i]) for i, result in chunk]
        for (i, _result), outcome in zip(chunk, got):
            outcomes[i] = outcome
    return outcomes


def _ingest_error(result: dict, payload) -> str:
    log.exception("ingest of probe %s failed", result.get("probe_id"))
    return reject(contract.TASK_RESULT, payload, "ingest error: " + traceback.format_exc(limit=3)[-3000:])


def _guarded(fn, result: dict, payload) -> str:
    try:
        return fn(result, payload)
    except TRANSIENT:
        raise  # not this half's fault: never kept as rejected (the whole batch is applied again)
    except Exception:  # keep the message and the reason, never lose it to a worker traceback
        return _ingest_error(result, payload)


def _ingest_pairs(batch: list[tuple[dict, object]]) -> list[str]:
    with transaction.atomic():
        rows = closing.probe_rows({result["probe_id"] for result, _ in batch})
        outcomes, claims = _claim_order(batch, rows)
        now = timezone.now()
        closed = _close_together(batch, rows, claims, now, outcomes)
        closed.update(_store_halves(batch, rows, claims, closed, now, outcomes))
    # The next round first: its commands are what the agents wait for. Then the browsers.
    rounds: dict[int, set[int]] = {}
    for pk in closed:
        rounds.setdefault(rows[pk].sweep_id, set()).add(rows[pk].round)
    for sweep_id, closed_in in rounds.items():
        if not closing.rounds_open(sweep_id, closed_in):
            lifecycle.advance_or_fail(sweep_id)
    closing.announce(rows, closed)
    return outcomes


def _claim_order(batch: list[tuple[dict, object]], rows: dict[int, ProbeRow]):
    """Each half's outcome if it is refused (None if it may be claimed), and the claims: rank -> probe -> index."""
    outcomes: list = []
    claims: dict[int, dict[int, int]] = {0: {}, 1: {}}
    for index, (result, payload) in enumerate(batch):
        refused = _refuse_half(result, payload, rows.get(result["probe_id"]))
        if refused is None and result["probe_id"] in claims[result["rank"]]:
            refused = DUPLICATE  # the same half twice in one batch: the first one counts
        if refused is None:
            claims[result["rank"]][result["probe_id"]] = index
        outcomes.append(refused)
    return outcomes, claims


def _close_together(batch, rows, claims, now, outcomes: list) -> dict[int, dict]:
    """Pairs with both halves in this batch (the usual case): halves and final result in one write,
    on rows that are open with both halves still empty."""
    together = {pk: (claims[0][pk], claims[1][pk]) for pk in claims[0].keys() & claims[1].keys()}
    results = {pk: merge.merge_halves(batch[a][0], batch[b][0]) for pk, (a, b) in together.items()}
    fields = closing.final_fields(rows, results, now)
    written = bulk.update_returning(
        PairProbe,
        {pk: {"half_a": batch[a][0], "half_b": batch[b][0], **fields[pk]} for pk, (a, b) in together.items()},
        where=f"{OPEN_WHERE} AND t.half_a IS NULL AND t.half_b IS NULL",
        where_params=OPEN_PAIR_STATUSES,
        constants={"finished": now},
    )
    for pk in written:
        a, b = together[pk]
        outcomes[min(a, b)], outcomes[max(a, b)] = APPLIED, FINAL
    return {pk: fields[pk] for pk in written}


def _store_halves(batch, rows, claims, closed: dict, now, outcomes: list) -> dict[int, dict]:
    """Every other half is claimed on its own; a pair whose other half was already stored closes."""
    complete: dict[int, merge.PairResult] = {}
    last: dict[int, int] = {}  # probe id -> batch index of the half that completed it
    for rank, wanted in claims.items():
        field, other = _HALF[rank], _HALF[1 - rank]
        stored = bulk.update_returning(
            PairProbe,
            {pk: {field: batch[index][0]} for pk, index in wanted.items() if pk not in closed},
            where=f"{OPEN_WHERE} AND t.{field} IS NULL",
            where_params=OPEN_PAIR_STATUSES,
            returning=(other,),
        )
        for pk, index in wanted.items():
            if pk in closed:
                continue
            outcomes[index] = APPLIED if pk in stored else DUPLICATE
            if pk in stored and stored[pk][0] is not None:
                mine, theirs = batch[index][0], stored[pk][0]
                complete[pk] = merge.merge_halves(mine, theirs) if rank == 0 else merge.merge_halves(theirs, mine)
                last[pk] = index
    written = closing.close_pairs(rows, complete, now, announce_now=False)
    for pk in written:
        outcomes[last[pk]] = FINAL
    return written


def _refuse_half(result: dict, payload, row: ProbeRow | None) -> str | None:
    """Why a half cannot be stored (rejected, late), or None if it may be claimed."""
    if row is None:
        return reject(contract.TASK_RESULT, payload, f"probe_id: no pair probe {result['probe_id']}")
    if error := other_sweep(result, row):
        return reject(contract.TASK_RESULT, payload, error)
    names = (row.a, row.b)
    if result["node"] not in names:
        return reject(
            contract.TASK_RESULT, payload, f"node: {result['node']} is not part of probe {row.pk} ({row.a}, {row.b})"
        )
    if result["rank"] != names.index(result["node"]):
        return reject(
            contract.TASK_RESULT,
            payload,
            f"rank: {result['node']} is rank {names.index(result['node'])} of probe {row.pk}, not {result['rank']}",
        )
    if row.status == "pending":  # no command for it has gone out: no genuine half can exist yet
        return reject(contract.TASK_RESULT, payload, f"probe_id: probe {row.pk} (round {row.round}) was not sent yet")
    if row.status not in OPEN_PAIR_STATUSES:
        log.info("late result for closed probe %s from %s ignored", row.pk, result["node"])
        return LATE
    return None
