"""False alarms: nightly full sweeps of a healthy namespace bed, four hosts, every core kept busy.

    flock /tmp/netns.lock .venv/bin/python benchmarks/false_alarms.py [--sweeps 20] [--database postgres://...]
        [--transfer] [--faults] [--recovery] [--confirmation on|off]

Method. Four hosts of the namespace test bed with the whole system
(``benchmarks/bed.py``: scratch database, private Redis over its unix socket,
server worker, beat, one agent per host), every setting at the product's default
and no fault injected. Once the agents are online, one busy-loop process per core
(``bash -c 'while :; do :; done'``, as ``scripts/soak --load`` runs them, each under
``timeout`` so that none outlives the benchmark) loads the machine until the end.
Then ``sweeps`` full sweeps run one after another, each requested as the nightly
schedule requests it (``sweeps.request_sweep(source="schedule", kind="full")``), so
the rolling baseline and each link's history (flapping, drift) build up over the
run as they do in production. Every alarm on this bed is a false one:

- ``false_alarm_sweeps``: sweeps whose verdict is not ``pass`` (or that did not finish);
- ``false_pairs``: pair rows whose status is not ``ok``, ``transient`` or ``contended``, over all
  the sweeps (a ``transient`` pair, bad once and fine when the confirmation pass probed it again,
  and a ``contended`` one, slow beside other work on its node, are reported and never acted on:
  ``transient_pairs`` and ``contended_pairs`` count them apart);
- ``findings_by_code``: findings of severity warn or fail, counted by code.

``alarms`` lists the first of them (sweep, what, text); ``seconds`` is the time of
the sweeps from the first request to the last sweep closed, and ``sweep_s`` the
median and worst server-side durations; ``confirm_rounds`` the extra rounds the
confirmation pass took, over all the sweeps. Target: none in 20 sweeps.

``--faults``: after the healthy sweeps, the same loaded bed stages each fault of
``FAULTS`` in turn (a firewall between two hosts, one-way loss, a node shaped to
200 Mbit/s, a lossy node, a node accepting no inbound connection, a size stall on
one path, a node advertising the address of a second NIC its peers cannot reach),
runs one full sweep with it and clears it. Per fault: ``found`` (the
verdict is not pass), ``culprit`` (right when a warn or fail finding names the
expected node or link), ``drains`` (the nodes ``slurm.blamed_nodes`` would drain),
``sweep_s`` (request to verdict, server-side), the pass's rounds, and each pair's
final status, reason, busbw and confirmation outcome.
``--transfer``: after the healthy sweeps, as many again with a bulk transfer beside them (iperf3,
two streams from the bed's third host to its fourth, for the rest of the run, on the links the
probes use), counted apart (``transfer``): the same targets, ``contended`` counted and shown.

``--recovery``: after each staged fault is cleared, one more full sweep (``after`` in the
fault's row: its verdict, the pairs not ``ok``); and at the end an agent stopped and started
between two sweeps (``restart``: the second sweep's verdict and pairs not ``ok``). Target:
every one of them ``pass`` with every pair ``ok``.

``--confirmation off`` runs everything with ``CLUSTER_HEALTH_CONFIRMATION=off``
(for comparison only): run it once each way to time the pass.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.bed import main_for, median, pair_rows, shielded, system_bed  # noqa: E402
from devtools.devstack import stop_process  # noqa: E402

HOSTS = 4
SWEEP_TIMEOUT_S = 600.0  # a full sweep of four loaded hosts still open after this is a hang
MAX_ALARMS = 30  # alarms listed in the figures, the first ones
BURN = "while :; do :; done"


def run(
    sweeps: int = 20,
    database: str | None = None,
    limit_s: float | None = None,
    faults: bool = False,
    confirmation: str = "on",
    transfer: bool = False,
    recovery: bool = False,
) -> dict:
    """Counts of false alarms over ``sweeps`` full sweeps; see the module docstring for the method."""
    staged_n = (len(FAULTS) * (2 if recovery else 1) if faults else 0) + (2 if recovery else 0)
    limit_s = limit_s or 600.0 + 240.0 * (sweeps * (2 if transfer else 1) + staged_n)
    os.environ["CLUSTER_HEALTH_CONFIRMATION"] = confirmation  # read by the server worker and by this process
    with (
        system_bed(HOSTS, limit_s, database=database) as system,
        cpu_load(len(os.sched_getaffinity(0)), limit_s) as cores,
    ):
        started = time.monotonic()
        records = [one_sweep(system) for _ in range(sweeps)]
        seconds = time.monotonic() - started
        out = {**summarize(records, seconds, cores), "confirmation": confirmation}
        if transfer:
            with bulk_transfer(system.bed, limit_s) as what:
                started = time.monotonic()
                beside = [one_sweep(system) for _ in range(sweeps)]
                out["transfer"] = {**summarize(beside, time.monotonic() - started, cores), "beside": what}
        out["faults"] = [staged(system, fault, recovery) for fault in FAULTS] if faults else []
        if recovery:
            out["restart"] = attempted(lambda: agent_restart(system))
    return out


def attempted(step) -> dict:
    """A step's figures, or what stopped it: one step that fails (an agent slow to come back on a loaded
    machine) costs its own row, never the rows already measured."""
    try:
        return step()
    except Exception as exc:  # reported in the figures, and the run goes on
        return {"error": f"{type(exc).__name__}: {exc}"}


def staged(system, fault, after: bool) -> dict:
    """one_fault, or its fault's name and what stopped it (the fault is cleared again)."""
    what, inject, clear, culprit = fault
    figures = attempted(lambda: one_fault(system, what, inject, clear, culprit, after=after))
    if "error" in figures:
        attempted(lambda: clear(system, [h.name for h in system.bed.hosts]))
        figures = {"fault": what, **figures}
    return figures


# Faults staged on hosts 1-4 of the bed: what, how to make it and clear it, and the culprit to name.
FAULTS = [
    (
        "firewall both ways",
        lambda s, h: s.bed.firewall_between(h[0], h[1]),
        lambda s, h: s.bed.heal(h[0], h[1]),
        (0, 1),
    ),
    ("one-way loss", lambda s, h: s.bed.drop(h[2], h[3]), lambda s, h: s.bed.undrop(h[2], h[3]), (2, 3)),
    ("node shaped to 200 Mbit/s", lambda s, h: s.bed.shape(h[0], 200), lambda s, h: s.bed.unshape(h[0]), (0,)),
    ("lossy node (5 % of its frames lost)", lambda s, h: s.bed.lose(h[1], 5), lambda s, h: s.bed.unlose(h[1]), (1,)),
    (
        "inbound connections blocked",
        lambda s, h: s.bed.block_inbound(h[1]),
        lambda s, h: s.bed.unblock_inbound(h[1]),
        (1,),
    ),
    (
        "packets over 1200 bytes dropped one way (size stall)",
        lambda s, h: s.bed.drop_large(h[1], h[3], 1200),
        lambda s, h: s.bed.undrop_large(h[1], h[3]),
        (1, 3),
    ),
    (
        "advertised address on a dead second NIC",
        lambda s, h: advertise_dead_nic(s, h[2]),
        lambda s, h: advertise_own(s, h[2]),
        (2,),
    ),
]


def one_fault(system, what, inject, clear, culprit, after: bool = False) -> dict:
    """One full sweep with the fault in place: found, the right culprit, what would drain, and its time;
    ``after``: and the next sweep once it is cleared (``after``: its verdict and pairs not ok)."""
    from cluster_health import sweeps
    from cluster_health.actions import slurm
    from cluster_health.models import Finding

    names = [h.name for h in system.bed.hosts]
    expected = names[culprit[0]] if len(culprit) == 1 else f"{names[culprit[0]]}<->{names[culprit[1]]}"
    inject(system, names)
    try:
        sweep = system.wait_closed(sweeps.request_sweep(source="command", kind="full"), timeout=SWEEP_TIMEOUT_S)
    finally:
        clear(system, names)
    named = sorted(
        {
            f"[{sev}] {code} {subject}"
            for sev, code, subject in Finding.objects.filter(sweep=sweep, severity__in=("warn", "fail")).values_list(
                "severity", "code", "subject"
            )
        }
    )
    subjects = {n.split(" ", 2)[2] for n in named}
    reverse = "<->".join(reversed(expected.split("<->")))
    return {
        "fault": what,
        "expected": expected,
        "verdict": sweep.verdict,
        "found": sweep.verdict not in ("pass", None),
        "culprit": expected in subjects or reverse in subjects,
        "findings": named,
        "drains": sorted(slurm.blamed_nodes(sweep)),
        "pairs": [
            f"{r.node_a.name}<->{r.node_b.name} {r.status}"
            + (f"/{r.reason}" if r.reason else "")
            + (f" {r.busbw_gbps:.3g} GB/s" if r.busbw_gbps is not None else "")
            + (
                f" ({(r.evidence or {})['confirmation'].get('outcome')})"
                if (r.evidence or {}).get("confirmation")
                else ""
            )
            for r in pair_rows(sweep)
        ],
        "sweep_s": sweep.duration_s(),
        "confirm_rounds": sweep.params.get("confirm_rounds", 0),
        **({"after": recovered(one_sweep(system))} if after else {}),
    }


def recovered(record: dict) -> dict:
    """A sweep after a fault was cleared, or after an agent came back: its verdict and what was not ok."""
    return {
        "sweep": record["sweep"],
        "verdict": record["verdict"],
        "not_ok": record["bad_pairs"] + record["transient"],
        "findings": [text for _, text in record["findings"]],
        "contended": record["contended_pairs"],
    }


def restart_agent(system, name: str, address: str | None = None, timeout: float = 120.0) -> None:
    """Stop the host's agent and start it again (advertising ``address``, else its own); return once the
    new agent has heartbeated (the old one's last heartbeat keeps the node online for a while)."""
    from django.utils import timezone

    from cluster_health.models import Node

    system.bed.stop_agent(name)
    restarted = timezone.now()
    system.bed.start_agent(name, system.broker_url, address=address or system.bed.host(name).address)
    deadline = time.monotonic() + timeout
    while not Node.objects.filter(name=name, last_heartbeat__gt=restarted).exists():
        if time.monotonic() > deadline:
            raise RuntimeError(f"the restarted agent on {name} sent no heartbeat in {timeout:.0f}s")
        time.sleep(0.2)


def agent_restart(system) -> dict:
    """A sweep, then one host's agent stopped and started again, then the sweep that counts."""
    one_sweep(system)
    host = system.bed.hosts[1]
    restart_agent(system, host.name)
    return {"host": host.name, **recovered(one_sweep(system))}


def advertise_dead_nic(system, name: str) -> None:
    """The host gets a second NIC on a network that loses every packet, and its agent advertises that address."""
    restart_agent(system, name, system.bed.add_dead_interface(name))


def advertise_own(system, name: str) -> None:
    restart_agent(system, name)
    system.bed.remove_dead_interface(name)


@contextmanager
def bulk_transfer(bed, limit_s: float):
    """iperf3 with two streams from the bed's third host to its fourth for the block, bounded by ``limit_s``."""
    server, client = bed.hosts[3], bed.hosts[2]
    quiet = {"stdin": subprocess.DEVNULL, "stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL}
    procs = [bed.start_in(server.name, ["timeout", str(int(limit_s)), "iperf3", "-s", "-p", "5203"], **quiet)]
    try:
        deadline = time.monotonic() + 10
        while ":5203" not in bed.run(server.name, "ss", "-ltn"):
            if time.monotonic() > deadline:
                raise RuntimeError("iperf3 server not listening after 10 s")
            time.sleep(0.1)
        stream = ["iperf3", "-c", server.address, "-p", "5203", "-t", str(int(limit_s)), "-P", "2"]
        procs.append(bed.start_in(client.name, ["timeout", str(int(limit_s)), *stream], **quiet))
        yield f"iperf3 {client.name} -> {server.name}, 2 streams"
    finally:
        with shielded():
            for proc in reversed(procs):
                stop_process(proc, timeout=10)


@contextmanager
def cpu_load(cores: int, limit_s: float):
    """One busy loop per core for the block, each bounded by ``limit_s`` should this process die first."""
    burners: list[subprocess.Popen] = []
    try:
        for _ in range(cores):
            burners.append(
                subprocess.Popen(
                    ["timeout", str(int(limit_s)), "bash", "-c", BURN], stdin=subprocess.DEVNULL, start_new_session=True
                )
            )
        yield cores
    finally:
        with shielded():
            for proc in burners:
                stop_process(proc, timeout=10)  # its process group: timeout and the bash loop below it


def one_sweep(system) -> dict:
    """A full sweep as the nightly schedule requests it, run to its end, with what it alarmed on."""
    from cluster_health import sweeps
    from cluster_health.models import Finding

    sweep = system.wait_closed(sweeps.request_sweep(source="schedule", kind="full"), timeout=SWEEP_TIMEOUT_S)
    rows = pair_rows(sweep)
    bad = [
        f"{r.node_a.name}<->{r.node_b.name}: {r.status}"
        + (f" at {r.stage} ({r.reason})" if r.reason else "")
        + (f" {r.hint}" if r.hint else "")
        for r in rows
        if r.status not in ("ok", "transient", "contended")
    ]
    findings = [
        (f.code, f"[{f.severity}] {f.subject}: {f.text}")
        for f in Finding.objects.filter(sweep=sweep, severity__in=("warn", "fail"))
    ]
    return {
        "sweep": sweep.pk,
        "status": sweep.status,
        "verdict": sweep.verdict,
        "sweep_s": sweep.duration_s(),
        "pairs": len(rows),
        "bad_pairs": bad,
        "transient_pairs": sum(r.status == "transient" for r in rows),
        "transient": [
            f"{r.node_a.name}<->{r.node_b.name}: transient {r.hint}" for r in rows if r.status == "transient"
        ],
        "contended_pairs": sum(r.status == "contended" for r in rows),
        "confirm_rounds": sweep.params.get("confirm_rounds", 0),
        "findings": findings,
    }


def summarize(records: list[dict], seconds: float, cores: int) -> dict:
    """The figures: counts of false alarms over the sweeps, and the first alarms themselves."""
    by_code: dict[str, int] = {}
    alarms: list[str] = []
    for r in records:
        if r["status"] != "finished" or r["verdict"] != "pass":
            alarms.append(f"sweep {r['sweep']}: {r['status']}, verdict {r['verdict']}")
        alarms += [f"sweep {r['sweep']}: pair {text}" for text in r["bad_pairs"]]
        for code, text in r["findings"]:
            by_code[code] = by_code.get(code, 0) + 1
            alarms.append(f"sweep {r['sweep']}: {text}"[:300])
    durations = [r["sweep_s"] for r in records if r["sweep_s"] is not None]
    false_sweeps = sum(r["status"] != "finished" or r["verdict"] != "pass" for r in records)
    false_pairs = sum(len(r["bad_pairs"]) for r in records)
    return {
        "hosts": HOSTS,
        "load_processes": cores,
        "sweeps": len(records),
        "pairs": sum(r["pairs"] for r in records),
        "false_alarm_sweeps": false_sweeps,
        "false_pairs": false_pairs,
        "transient_pairs": sum(r.get("transient_pairs", 0) for r in records),
        "contended_pairs": sum(r.get("contended_pairs", 0) for r in records),
        "confirm_rounds": sum(r.get("confirm_rounds") or 0 for r in records),
        "findings_by_code": dict(sorted(by_code.items())),
        "verdicts": [r["verdict"] for r in records],
        "seconds": round(seconds, 1),
        "sweep_s_median": median(durations),
        "sweep_s_max": max(durations) if durations else None,
        "alarms": alarms[:MAX_ALARMS],
        "none": false_sweeps == 0 and false_pairs == 0 and not by_code,
    }


# The command line: each flag with argparse's keywords, its value passed to run() by name.
OPTIONS: dict[str, dict] = {
    "--sweeps": {"type": int, "default": 20, "help": "full sweeps, one after another (default 20)"},
    "--database": {"default": None, "help": "postgres:// server URL (default: scratch SQLite)"},
    "--limit-s": {
        "type": float,
        "default": None,
        "dest": "limit_s",
        "help": "wall-clock limit of the whole run (default 600 + 240 per sweep and staged fault)",
    },
    "--faults": {"action": "store_true", "help": "after the healthy sweeps, stage each fault of FAULTS"},
    "--transfer": {"action": "store_true", "help": "as many sweeps again beside a bulk transfer (iperf3)"},
    "--recovery": {
        "action": "store_true",
        "help": "a sweep after each staged fault is cleared, and an agent restarted between two sweeps",
    },
    "--confirmation": {
        "choices": ["on", "off"],
        "default": "on",
        "help": "CLUSTER_HEALTH_CONFIRMATION for the run (off: for comparison only)",
    },
}

if __name__ == "__main__":
    sys.exit(main_for(run, __doc__, OPTIONS))
