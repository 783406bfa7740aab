"""Hang doctor: seconds from asking about a hung job to its verdict, beside a pair sweep alone.

    flock /tmp/netns.lock .venv/bin/python benchmarks/hang.py [--repeats 3] [--hosts 8] [--straggler]

Method. Two hosts of the namespace test bed with the whole system (``benchmarks/bed.py``:
scratch database, private Redis, server worker, beat, one agent per host, every setting at
the product's default). A two-rank Gloo job (``devtools/hung_job.py train``: an
``all_reduce`` every 50 ms, one rank per host, launched as srun launches them, its Flight
Recorder on and each rank's worker server on a socket of its own) runs until both ranks are
in their loop; then nftables drops every packet between the hosts, and the job hangs in its
next ``all_reduce``. Three figures, each from its request to its answer, in this process on
the same bed and the same hung job:

- ``hang_s``: ``hangs.request`` and ``hangs.run`` (what ``manage.py hang`` and the API run:
  both agents read the ranks, two samples 2 s apart, a live connectivity probe between the
  two hosts, the join), and the verdict it reached;
- ``fr_analysis_s``: a rank-0 Flight Recorder analysis alone, as torch's own debug server
  runs it (``torch.distributed.debug``'s FlightRecorder page): every rank's ``fr_trace_json``
  from its worker server, then ``torch.distributed.flight_recorder``'s ``build_db`` with the
  arguments that page gives it; ``fr_analysis`` says what it concluded, or how it failed;
- ``pair_sweep_s``: a ``pairs`` sweep of the two hosts alone (what a sweep tells about the
  same link: a failed cell, no word about the job).

For comparison, torch's own default: a Gloo collective whose peer went silent raises after
30 minutes (``init_process_group``'s default timeout), naming no culprit.

``--hosts N``: the job over N hosts of the bed (one rank each), the link between host1 and host2
dropped; the pair sweep is still of those two.

``--straggler``: instead, a job that progresses held back by a slow host: N hosts (3 by default),
1 MiB all_reduces, host N's egress shaped to 20 Mbit/s (tc tbf), and ``hang_s`` with the verdict and the
first culprit's subject; then the shaping lifted and the same job asked again (``healed``: its verdict
and seconds), which must be ``progressing``.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from agents.hangs import flight, procs  # noqa: E402
from benchmarks.bed import main_for, system_bed  # noqa: E402
from devtools import devstack, hang_jobs  # noqa: E402

PAIR = ["host1", "host2"]
STRAGGLER_MBIT = 20


def torch_fr_analysis(selector: procs.JobSelector) -> tuple[float, str]:
    """Seconds and outcome of torch's own Flight Recorder analysis of the job: each rank's fr_trace_json
    from its worker server, then build_db as torch.distributed.debug's FlightRecorder page calls it."""
    from torch.distributed.flight_recorder.components.builder import build_db
    from torch.distributed.flight_recorder.components.config_manager import JobConfig

    started = time.monotonic()
    details: dict[str, Any] = {}
    for r in procs.find_ranks(selector):
        body = flight._from_socket(r.launch[flight.SOCKET_VARIABLE], r.pid, "/proc")
        details[f"rank{r.rank}.json"] = {"rank": r.rank, "host_name": f"rank{r.rank}", **json.loads(body)}
    args = JobConfig().parse_args(args=[])
    args.allow_incomplete_ranks, args.verbose = True, True
    try:
        db = build_db(details, args, next(iter(details.values()))["version"])
        outcome = f"{len(db.collectives)} collectives matched, {len(db.ncclcalls)} calls"
    except Exception as exc:  # what the analyser does with these dumps is the figure
        outcome = f"failed: {type(exc).__name__}: {str(exc)[:120]}"
    return round(time.monotonic() - started, 3), outcome


def run(
    repeats: int = 3, database: str | None = None, limit_s: float = 900.0, hosts: int = 2, straggler: bool = False
) -> dict:
    """Figures of each repeat and their medians; see the module docstring for the method."""
    if straggler:
        return run_straggler(repeats, database, limit_s, max(3, hosts))
    names = [f"host{i + 1}" for i in range(hosts)]
    hang_s, sweep_s, verdicts, fr_s, fr_outcomes, places, culprits, timings = [], [], [], [], [], [], [], []
    with system_bed(hosts, limit_s, database=database) as system:
        from cluster_health import hang_diagnoses as hangs  # Django is set up by now

        bed = system.bed
        for i in range(repeats):
            port = devstack.free_port()
            sockets = Path(tempfile.mkdtemp(prefix="fr-", dir="/tmp"))
            ranks = hang_jobs.start_on_bed(bed, names, port, bed.workdir / f"job-{i}.log", flight=sockets)
            try:
                bed.firewall_between(*PAIR)
                time.sleep(2.0)  # the job's next all_reduce has sent and is waiting
                started = time.monotonic()
                diagnosis = hangs.request(master=f"{bed.host(PAIR[0]).address}:{port}", nodes=names, source="command")
                answer = hangs.run(diagnosis, 60.0)
                hang_s.append(round(time.monotonic() - started, 2))
                verdicts.append(answer["verdict"])
                culprits.append([c["subject"] for c in answer["culprits"]][:3])
                timings.append({**answer.get("timings", {}), "probed": answer.get("probed")})
                # Where each rank was (collective, sequence number, whether it moved): what the verdict read.
                places.append(
                    [[r["rank"], r["in"].get("collective"), r["in"].get("seq"), r["moved"]] for r in answer["ranks"]]
                )
                seconds, outcome = torch_fr_analysis(
                    procs.JobSelector(master_addr=bed.host(PAIR[0]).address, master_port=port)
                )
                fr_s.append(seconds)
                fr_outcomes.append(outcome)
                started = time.monotonic()
                system.sweep(kind="pairs", pairs=[PAIR], baseline="none", timeout=120)
                sweep_s.append(round(time.monotonic() - started, 2))
            finally:
                bed.heal(*PAIR)
                hang_jobs.stop(ranks)
                shutil.rmtree(sockets, ignore_errors=True)
    return {
        "repeats": repeats,
        "hosts": hosts,
        "hang_s": hang_s,
        "hang_median_s": statistics.median(hang_s),
        "verdicts": verdicts,
        "culprits": culprits,
        "timings": timings,
        "ranks": places,
        "fr_analysis_s": fr_s,
        "fr_analysis_median_s": statistics.median(fr_s),
        "fr_analysis": fr_outcomes,
        "pair_sweep_s": sweep_s,
        "pair_sweep_median_s": statistics.median(sweep_s),
        "torch_default_timeout_s": 1800,
    }


def raw_steps(stragglers: Any, ranks: list) -> dict | None:
    """core.stragglers' figures of the steps with every threshold at zero (the last rank, its share, lateness)."""
    kept = stragglers.MIN_STEPS, stragglers.MIN_LATENESS_S, stragglers.JITTER_FACTOR
    stragglers.MIN_STEPS, stragglers.MIN_LATENESS_S, stragglers.JITTER_FACTOR = 1, 0.0, 0.0
    try:
        return stragglers.from_flight(ranks, 0.0)
    finally:
        stragglers.MIN_STEPS, stragglers.MIN_LATENESS_S, stragglers.JITTER_FACTOR = kept


def run_straggler(repeats: int, database: str | None, limit_s: float, hosts: int) -> dict:
    """The slow-host case (module docstring): seconds, verdict and culprit, shaped and then healed."""
    names = [f"host{i + 1}" for i in range(hosts)]
    slow, healed = [], []
    os.environ["HUNG_JOB_FLOATS"] = str(256 * 1024)  # read by each rank (the bed passes its environment on)
    with system_bed(hosts, limit_s, database=database) as system:
        from cluster_health import hang_diagnoses as hangs
        from cluster_health.core import stragglers

        bed = system.bed
        for i in range(repeats):
            port = devstack.free_port()
            sockets = Path(tempfile.mkdtemp(prefix="fr-", dir="/tmp"))
            ranks = hang_jobs.start_on_bed(bed, names, port, bed.workdir / f"job-{i}.log", flight=sockets)
            master = f"{bed.host(names[0]).address}:{port}"
            try:
                bed.shape(names[-1], STRAGGLER_MBIT)
                time.sleep(4.0)  # the recorders hold shaped steps
                started = time.monotonic()
                diagnosis = hangs.request(master=master, nodes=names, source="command")
                answer = hangs.run(diagnosis, 60.0)
                first = answer["culprits"][0] if answer["culprits"] else {}
                steps = (first.get("evidence") or {}).get("steps") or {}
                slow.append(
                    {
                        "s": round(time.monotonic() - started, 2),
                        "verdict": answer["verdict"],
                        "culprit": first.get("subject"),
                        "rank_last": steps.get("rank"),
                        "lateness_s": steps.get("lateness_s"),
                        "last_in": f"{steps.get('last_in')}/{steps.get('steps')}",
                        # What the steps showed with no threshold, and the probe's busbw: why a run said what it said.
                        "steps": raw_steps(stragglers, hangs._ranks(diagnosis)),
                        "busbw": {f"{p['a']}-{p['b']}": p["busbw_gbps"] for p in answer["pairs"]},
                        "probed": answer.get("probed"),
                    }
                )
                bed.unshape(names[-1])
                time.sleep(3.0)  # the recorders' last steps are unshaped
                started = time.monotonic()
                answer = hangs.run(hangs.request(master=master, nodes=names, source="command"), 60.0)
                healed.append({"s": round(time.monotonic() - started, 2), "verdict": answer["verdict"]})
            finally:
                bed.unshape(names[-1])
                hang_jobs.stop(ranks)
                shutil.rmtree(sockets, ignore_errors=True)
    return {
        "repeats": repeats,
        "hosts": hosts,
        "shaped": f"{names[-1]} at {STRAGGLER_MBIT} Mbit/s",
        "slow": slow,
        "slow_median_s": statistics.median(r["s"] for r in slow),
        "healed": healed,
        "healed_median_s": statistics.median(r["s"] for r in healed),
    }


# The command line: each flag with argparse's keywords, its value passed to run() by name.
OPTIONS: dict[str, dict] = {
    "--repeats": {"type": int, "default": 3},
    "--database": {"default": None},
    "--hosts": {"type": int, "default": 2},
    "--straggler": {"action": "store_true"},
}

if __name__ == "__main__":
    sys.exit(main_for(run, __doc__, OPTIONS))
