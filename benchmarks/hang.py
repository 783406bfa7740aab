"""Hang doctor: seconds from asking about a hung job to its verdict, beside a pair sweep alone.

    flock /tmp/netns.lock .venv/bin/python benchmarks/hang.py [--repeats 3]

Method. Two hosts of the namespace test bed with the whole system (``benchmarks/bed.py``:
scratch database, private Redis, server worker, beat, one agent per host, every setting at
the product's default). A two-rank Gloo job (``devtools/hung_job.py train``: an
``all_reduce`` every 50 ms, one rank per host, launched as srun launches them) runs until
both ranks are in their loop; then nftables drops every packet between the hosts, and the
job hangs in its next ``all_reduce``. Two figures, each from its request to its answer, in
this process on the same bed and the same hung job:

- ``hang_s``: ``hangs.request`` and ``hangs.run`` (what ``manage.py hang`` and the API run:
  both agents read the ranks, two samples 2 s apart, a live connectivity probe between the
  two hosts, the join), and the verdict it reached;
- ``pair_sweep_s``: a ``pairs`` sweep of the two hosts alone (what a sweep tells about the
  same link: a failed cell, no word about the job).

For comparison, torch's own default: a Gloo collective whose peer went silent raises after
30 minutes (``init_process_group``'s default timeout), naming no culprit. Flight Recorder
analysis is not measured yet (docs/HANGS.md, "Limits today").
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.bed import main_for, system_bed  # noqa: E402
from devtools import devstack, hang_jobs  # noqa: E402

PAIR = ["host1", "host2"]


def run(repeats: int = 3, database: str | None = None, limit_s: float = 900.0) -> dict:
    """Figures of each repeat and their medians; see the module docstring for the method."""
    hang_s, sweep_s, verdicts = [], [], []
    with system_bed(2, limit_s, database=database) as system:
        from cluster_health import hangs  # Django is set up by now

        bed = system.bed
        for i in range(repeats):
            port = devstack.free_port()
            ranks = hang_jobs.start_on_bed(bed, PAIR, port, bed.workdir / f"job-{i}.log")
            try:
                bed.firewall_between(*PAIR)
                time.sleep(2.0)  # the job's next all_reduce has sent and is waiting
                started = time.monotonic()
                diagnosis = hangs.request(master=f"{bed.host(PAIR[0]).address}:{port}", nodes=PAIR, source="command")
                answer = hangs.run(diagnosis, 60.0)
                hang_s.append(round(time.monotonic() - started, 2))
                verdicts.append(answer["verdict"])
                started = time.monotonic()
                system.sweep(kind="pairs", pairs=[PAIR], baseline="none", timeout=120)
                sweep_s.append(round(time.monotonic() - started, 2))
            finally:
                bed.heal(*PAIR)
                hang_jobs.stop(ranks)
    return {
        "repeats": repeats,
        "hang_s": hang_s,
        "hang_median_s": statistics.median(hang_s),
        "verdicts": verdicts,
        "pair_sweep_s": sweep_s,
        "pair_sweep_median_s": statistics.median(sweep_s),
        "torch_default_timeout_s": 1800,
    }


# The command line: each flag with argparse's keywords, its value passed to run() by name.
OPTIONS: dict[str, dict] = {"--repeats": {"type": int, "default": 3}, "--database": {"default": None}}

if __name__ == "__main__":
    sys.exit(main_for(run, __doc__, OPTIONS))
