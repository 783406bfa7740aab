"""Diagnosing one running job (docs/HANGS.md): ask the agents of its nodes what they see of it,
probe the network between the nodes that hold its ranks, and join the two.

``request`` stores a diagnosis and sends a signed ``inspect`` command to each node's agent;
their reports arrive through the ingest consumer (``ingest.inspections``). ``start_live_probe``
runs a connectivity sweep over the nodes that reported ranks; ``conclude`` joins the reports and
the probe's pairs with ``core.hangs.diagnose`` and keeps the answer on the row. ``manage.py hang``
drives the three with a deadline.

An inspect holds its agent's single command slot for seconds, and a probe that cannot start within
its grace times out: a node a running sweep covers gets its inspect only after that sweep ends,
within the diagnosis's collecting time, else the answer names it busy in that sweep, not silent
(``sweeps.turns``; a sweep likewise waits for an inspect in flight, and so does another diagnosis's inspect).
"""

from __future__ import annotations

import time
from typing import Any

from django.db import transaction
from django.db.models import F
from django.utils import timezone

from agents.hangs import contract as hangs_contract
from cluster_health import sweeps
from cluster_health.actions import slurm
from cluster_health.core import hangs, init_hangs, stragglers
from cluster_health.models import HangDiagnosis, HangReport, Node, Sweep
from cluster_health.queues import dispatch
from cluster_health.shapes import documents
from cluster_health.sweeps import turns

MAX_FRAMES_SHOWN = 12  # per rank in the answer: where it is, innermost first
MAX_SUSPECT_PAIRS = 32  # pairs probed first, the ones the ranks' connections point at
# A suspect pair's TCP connect and store wait get this long (a sweep's: 3 s and 5 s): a path that drops
# traffic fails the probe, twice with the confirmation pass, in a few seconds; a healthy one connects and
# joins in milliseconds (the agents' warm probe processes start at once).
SUSPECT_TIMEOUTS = {"connect": 1.0, "store": 2.0}
STRAGGLER_PROBE_BYTES = 256 * 1024  # a progressing job held back by a rank: each pair's busbw at this size
HELD_MARGIN_S = 4.0  # a held-back inspect is sent only if its interval and this much collecting time remain


class HangRequestError(ValueError):
    """The diagnosis cannot be asked for as given (no such node, no job named)."""


def request(
    master: str | None = None,
    slurm_job: str | None = None,
    nodes: list[str] | None = None,
    interval_s: float = 2.0,
    source: str = "command",
    requested_by: str = "",
) -> HangDiagnosis:
    """Store a diagnosis and send each node's agent an inspect command (every active node by default)."""
    if (master is None) == (slurm_job is None):
        raise HangRequestError("name the job by its master (ADDR:PORT) or its Slurm job id")
    if master is not None:
        _master(master)
    if nodes:
        known = set(Node.objects.filter(name__in=nodes).values_list("name", flat=True))
        if unknown := [n for n in nodes if n not in known]:
            raise HangRequestError(f"unknown node(s): {', '.join(unknown[:20])}")
    elif slurm_job is not None:
        nodes = slurm_job_nodes(slurm_job)
    else:
        nodes = list(Node.objects.filter(active=True).order_by("name").values_list("name", flat=True))
    with transaction.atomic():
        diagnosis = HangDiagnosis.objects.create(  # the first write: on SQLite, the turn lock itself
            master=master or "",
            slurm_job=slurm_job or "",
            nodes=nodes,
            interval_s=interval_s,
            source=source,
            requested_by=requested_by,
        )
        turns.claim()
        diagnosis.inspects = _turns(diagnosis.pk, nodes)
        diagnosis.save(update_fields=["inspects"])
    _send(diagnosis, [n for n in nodes if "sent" in diagnosis.inspects[n]])
    return diagnosis


def _turns(pk: int, nodes: list[str]) -> dict[str, dict[str, Any]]:
    """Each node's inspect, sent now unless a running sweep covers the node ({"busy": sweep id}) or
    another diagnosis's inspect is in flight there ({"after": its id}): one command slot per agent."""
    busy, now = turns.sweeping(nodes), time.time()
    after = turns.inspected([n for n in nodes if n not in busy], excluding=pk)
    return {n: {"busy": busy[n]} if n in busy else {"after": after[n]} if n in after else {"sent": now} for n in nodes}


def _master(master: str) -> tuple[str, int]:
    addr, sep, port_text = master.rpartition(":")
    if not sep or not addr or not port_text.isdigit() or not 0 < int(port_text) < 65536:
        raise HangRequestError(f"master {master!r}: expected MASTER_ADDR:MASTER_PORT")
    return addr.strip("[]"), int(port_text)


def _send(diagnosis: HangDiagnosis, nodes: list[str]) -> None:
    """Send the signed inspect command to each of ``nodes``' agents."""
    addr, port = _master(diagnosis.master) if diagnosis.master else (None, None)
    slurm_job = diagnosis.slurm_job or None
    expires_at = time.time() + dispatch.START_GRACE_S
    commands = [
        hangs_contract.validate_command(
            {
                "v": 1,
                "kind": hangs_contract.KIND,
                "probe_id": diagnosis.pk,
                "node": node,
                "master_addr": addr,
                "master_port": port,
                "slurm_job": slurm_job,
                "interval_s": diagnosis.interval_s,
                "expires_at": expires_at,
                "lifetime_s": dispatch.START_GRACE_S,
            }
        )
        for node in nodes
    ]
    if commands:
        dispatch.send_commands(commands)


def send_held(diagnosis: HangDiagnosis) -> list[str]:
    """Send the inspects held back whose node is free now; a node still busy (or busy again) stays held,
    named with what holds it. Returns the nodes sent to."""
    if not held(diagnosis):
        return []
    with transaction.atomic():
        HangDiagnosis.objects.filter(pk=diagnosis.pk).update(status=F("status"))  # SQLite: write first
        turns.claim()
        row = HangDiagnosis.objects.get(pk=diagnosis.pk)
        now_held = _turns(row.pk, list(held(row)))
        row.inspects = {**row.inspects, **now_held}
        row.save(update_fields=["inspects"])
    diagnosis.inspects = row.inspects
    free = [n for n, v in now_held.items() if "sent" in v]
    _send(diagnosis, free)
    return free


def held(diagnosis: HangDiagnosis) -> dict[str, dict[str, Any]]:
    """The nodes whose inspect is still held back, each with what it waits for (``_turns``)."""
    return {n: v for n, v in sorted(diagnosis.inspects.items()) if "sent" not in v}


def _held_text(waiting: dict[str, dict[str, Any]]) -> str:
    by_holder: dict[tuple[str, int], list[str]] = {}
    for node, v in waiting.items():
        by_holder.setdefault(("sweep", v["busy"]) if "busy" in v else ("hang diagnosis", v["after"]), []).append(node)
    return "; ".join(
        f"not inspected, busy in {what} #{pk}: {', '.join(nodes[:20])}"
        for (what, pk), nodes in sorted(by_holder.items())
    )


def slurm_job_nodes(job_id: str) -> list[str]:
    """The cluster-health nodes a running Slurm job holds (slurmctld's NodeList, through the node map)."""
    try:
        held = set(slurm.job_nodes(job_id))
    except (slurm.SlurmError, slurm.NodeMapError) as exc:
        raise HangRequestError(str(exc)) from None
    active = Node.objects.filter(active=True).order_by("name").values_list("name", flat=True)
    nodes = [n for n in active if _slurm_name(n) in held]
    if not nodes:
        raise HangRequestError(f"job {job_id} runs on {', '.join(sorted(held)[:20])}: none is a registered node")
    return nodes


def _slurm_name(node: str) -> str | None:
    try:
        return slurm.slurm_name(node)
    except slurm.NodeMapError:
        return None


def reported(diagnosis: HangDiagnosis) -> set[str]:
    return set(HangReport.objects.filter(diagnosis=diagnosis).values_list("node", flat=True))


def _ranks(diagnosis: HangDiagnosis) -> list[dict[str, Any]]:
    """Every rank the nodes reported, each once, on the node its own connections say it runs on.

    Agents that share a process table (containers, a namespace test bed) each report every
    rank, but each sees only its own network namespace's sockets: a rank is placed on the one
    asked node whose registered address its sockets use locally, with the report that saw
    those sockets; failing that, on the one node that reported it, or the first.
    """
    addresses: dict[str, set[str]] = {}
    for name, address in Node.objects.filter(name__in=diagnosis.nodes).values_list("name", "address"):
        addresses.setdefault(address, set()).add(name)
    seen: dict[tuple[Any, Any], list[dict[str, Any]]] = {}
    for report in HangReport.objects.filter(diagnosis=diagnosis).order_by("node"):
        for rank in report.ranks:
            if isinstance(rank, dict):
                seen.setdefault((rank.get("rank"), rank.get("pid")), []).append({**rank, "seen_by": report.node})
    placed = []
    for views in seen.values():
        own = next(((v, n) for v in views if (n := _own_node(v, addresses))), None)
        view, node = own if own else (views[0], views[0]["seen_by"])
        placed.append({**view, "node": node})
    return sorted(placed, key=lambda r: (r.get("rank") is None, r.get("rank") or 0))


def _own_node(rank: dict[str, Any], addresses: dict[str, set[str]]) -> str | None:
    """The one node whose registered address the rank's connections use on their local side, if any."""
    locals_ = {str(c.get("local", "")).rsplit(":", 1)[0] for c in rank.get("connections") or [] if isinstance(c, dict)}
    nodes = {n for address in locals_ for n in addresses.get(address, ())}
    return next(iter(nodes)) if len(nodes) == 1 else None


def rank_nodes(diagnosis: HangDiagnosis) -> list[str]:
    return sorted({r["node"] for r in _ranks(diagnosis)})


def suspect_pairs(diagnosis: HangDiagnosis) -> list[list[str]]:
    """The node pairs the reports point at, both ends reported: a rank's connection that holds bytes its peer
    never acknowledged and retransmits them (``core.hangs``' evidence of a path fault), peer by address."""
    done = reported(diagnosis)
    by_address: dict[str, set[str]] = {}
    for name, address in Node.objects.filter(name__in=diagnosis.nodes).values_list("name", "address"):
        by_address.setdefault(address, set()).add(name)
    found: set[tuple[str, str]] = set()
    for rank in _ranks(diagnosis):
        for c in rank.get("connections") or []:
            if not isinstance(c, dict) or not _positive(c.get("unacked_bytes")) or not _positive(c.get("retransmits")):
                continue
            peers = by_address.get(str(c.get("peer", "")).rsplit(":", 1)[0].strip("[]"), set())
            if len(peers) == 1 and (peer := next(iter(peers))) != rank["node"] and {peer, rank["node"]} <= done:
                found.add((min(peer, rank["node"]), max(peer, rank["node"])))
    return [list(p) for p in sorted(found)][:MAX_SUSPECT_PAIRS]


def _positive(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def start_suspect_probe(diagnosis: HangDiagnosis, pairs: list[list[str]]) -> Sweep:
    """A pairs sweep of the pairs the evidence points at, sent as soon as both ends reported (while the other
    nodes' inspects still run): the first answer about the likeliest fault."""
    sweep = sweeps.request_sweep(
        kind="pairs",
        pairs=pairs,
        last_stage="collective",
        baseline="none",
        timeouts=SUSPECT_TIMEOUTS,
        source="hang",
    )
    HangDiagnosis.objects.filter(pk=diagnosis.pk).update(sweep=sweep, status="probing")
    diagnosis.sweep, diagnosis.status = sweep, "probing"
    return sweep


def start_live_probe(diagnosis: HangDiagnosis, measure: bool = False) -> Sweep | None:
    """A connectivity sweep between the nodes that hold the job's ranks (none for fewer than two); with
    ``measure``, each pair's bandwidth too (one message size: a straggler's link against the others)."""
    nodes = rank_nodes(diagnosis)
    if len(nodes) < 2:
        return None
    extra: dict[str, Any] = (
        {"last_stage": "bandwidth", "sizes": [STRAGGLER_PROBE_BYTES], "iterations": 3, "warmup": 1} if measure else {}
    )
    sweep = sweeps.request_sweep(kind="connectivity", nodes=nodes, source="hang", **extra)
    HangDiagnosis.objects.filter(pk=diagnosis.pk).update(sweep=sweep, status="probing")
    diagnosis.sweep, diagnosis.status = sweep, "probing"
    return sweep


def _shown_rank(rank: dict[str, Any]) -> dict[str, Any]:
    main = next((t for t in rank.get("threads") or [] if t.get("thread") == "MainThread"), None)
    return {
        "rank": rank.get("rank"),
        "node": rank.get("node"),
        "pid": rank.get("pid"),
        "state": rank.get("state"),
        "in": hangs.position(rank),
        "moved": rank.get("moved"),
        "frames": (main or {}).get("frames", [])[:MAX_FRAMES_SHOWN],
        "connections": rank.get("connections") or [],
        "stack_error": rank.get("stack_error"),
    }


def conclude(diagnosis: HangDiagnosis) -> dict[str, Any]:
    """Join the reports and the live probe into the answer, keep it on the row, and return it."""
    ranks = _ranks(diagnosis)
    waiting = held(diagnosis)
    silent = sorted(set(diagnosis.nodes) - reported(diagnosis) - set(waiting))
    errors = dict(HangReport.objects.filter(diagnosis=diagnosis).exclude(error="").values_list("node", "error"))
    pairs: list[dict[str, Any]] = []
    if diagnosis.sweep_id:
        sweep = Sweep.objects.get(pk=diagnosis.sweep_id)
        pairs = documents.pair_dicts(sweep) if not sweep.is_open else []
    entries = ranks  # with torchrun's launchers, other-master ranks and port holders (core/init_hangs.py)
    parts = init_hangs.split(entries)
    ranks = parts["ranks"]
    world = max((r.get("world_size") or 0 for r in ranks + parts["launchers"]), default=0) or None
    # Silent nodes blame missing ranks only when some ranks are missing: a node the job never ran on is silent too.
    answer = hangs.diagnose(entries, world, pairs, silent_nodes=silent if entries else [], nodes=diagnosis.nodes)
    if not entries and silent:
        answer["why"] = f"{answer['why']} (no answer from: {', '.join(silent[:20])})"
    if waiting:
        answer["why"] = f"{answer.get('why') or ''} ({_held_text(waiting)})".strip()
    result = {
        "diagnosis": diagnosis.pk,
        "job": {
            "master": diagnosis.master or None,
            "slurm_job": diagnosis.slurm_job or None,
            "nodes": rank_nodes(diagnosis),
            "world_size": world,
            "ranks_found": len(ranks),
        },
        "hung": answer["hung"],
        "verdict": answer["verdict"],
        "culprits": answer["culprits"],
        "why": answer.get("why"),
        "ranks": [_shown_rank(r) for r in ranks],
        "init": answer.get("init"),
        "pairs": pairs,
        "looked": {
            "asked": diagnosis.nodes,
            "silent": silent,
            "busy": {n: v["busy"] for n, v in waiting.items() if "busy" in v},  # in a running sweep: its id
            "busy_inspecting": {n: v["after"] for n, v in waiting.items() if "after" in v},  # another diagnosis
            "errors": errors,
        },
        "live_probe": diagnosis.sweep_id,
    }
    HangDiagnosis.objects.filter(pk=diagnosis.pk).update(
        status="finished", verdict=answer["verdict"], hung=answer["hung"], result=result, finished=timezone.now()
    )
    return result


POLL_S = 0.2


def _bad_pairs(sweep: Sweep) -> bool:
    return any(p.get("status") in hangs.BAD_PAIR_STATUSES for p in documents.pair_dicts(sweep))


def _slow_candidate(diagnosis: HangDiagnosis) -> bool:
    """Whether the reports alone show a progressing job held back by a rank (its probe then measures busbw)."""
    ranks = _ranks(diagnosis)
    world = max((r.get("world_size") or 0 for r in ranks), default=0) or None
    verdict = hangs.diagnose(ranks, world, [])["verdict"] if ranks else None
    return verdict == "slow" or (verdict == "progressing" and stragglers.candidate(ranks) is not None)


def run(diagnosis: HangDiagnosis, timeout_s: float) -> dict[str, Any]:
    """Drive a requested diagnosis to its answer within ``timeout_s`` (the command and the API's task use it):

    1. wait for the nodes' reports (all of them, or half the time); as soon as both ends of a pair the
       reports point at (a connection retransmitting unacknowledged bytes) have reported, probe that pair,
       while the other nodes' inspects still run (``suspect_pairs``; a node is probed only once its own
       inspect reported: the turns rule);
    2. when that probe finds the pair failing, conclude on it: the likeliest fault, confirmed;
    3. else probe every pair of the nodes that hold ranks (with each pair's busbw when the reports show a
       straggler), and conclude.
    """
    from cluster_health.sweeps import waiting

    started = time.monotonic()
    deadline = started + timeout_s
    collect_until = started + max(diagnosis.interval_s + 8.0, timeout_s / 2)
    first: Sweep | None = None
    marks: dict[str, float] = {}
    heard = 0
    while time.monotonic() < min(collect_until, deadline) and (now := reported(diagnosis)) != set(diagnosis.nodes):
        if min(collect_until, deadline) - time.monotonic() > diagnosis.interval_s + HELD_MARGIN_S:
            send_held(diagnosis)
        # The reports are read again only when another one arrived.
        if first is None and len(now) > max(1, heard) and (suspects := suspect_pairs(diagnosis)):
            first = start_suspect_probe(diagnosis, suspects)
            marks["suspect_probe_sent"] = time.monotonic()
        heard = len(now)
        time.sleep(POLL_S)
    marks["reports"] = time.monotonic()
    if first is None and (suspects := suspect_pairs(diagnosis)):
        first = start_suspect_probe(diagnosis, suspects)
        marks["suspect_probe_sent"] = time.monotonic()
    sweep = None
    if first is not None:
        waiting.wait_or_cancel(first, max(1.0, deadline - time.monotonic()))
        first.refresh_from_db()
        marks["suspect_probe_done"] = time.monotonic()
    if first is None or not _bad_pairs(first):
        sweep = start_live_probe(diagnosis, measure=_slow_candidate(diagnosis))
    if sweep is not None:
        waiting.wait_or_cancel(sweep, max(1.0, deadline - time.monotonic()))
        marks["probe_done"] = time.monotonic()
    answer = conclude(HangDiagnosis.objects.get(pk=diagnosis.pk))
    answer["seconds"] = round(time.monotonic() - started, 1)
    answer["probed"] = "every pair" if sweep is not None else "suspect pairs" if first is not None else "none"
    answer["timings"] = {k: round(v - started, 1) for k, v in marks.items()}  # seconds from the start
    HangDiagnosis.objects.filter(pk=diagnosis.pk).update(result=answer)
    return answer
