"""Init-time hangs: seconds from the request to the answer for each case, on the namespace test bed.

Method. Two hosts of the namespace test bed with the whole system (``benchmarks/bed.py``: scratch
database, Redis, server worker, beat, one agent per host). For each case and repeat, a two-rank Gloo
job (``devtools/hung_job.py init``, launched as srun launches, ``hang_jobs.start_init_on_bed``) is hung at
init_process_group with its master on host1, and the hang doctor is asked as ``manage.py hang`` asks
(``hang_diagnoses.request`` then ``run``, 60 s, interval 1 s); ``seconds`` is from the request to the
answer, with its verdict and first culprit. Cases: ``store_firewalled`` (host1 drops tcp to the store's
port), ``gloo_on_loopback`` (host2's rank on GLOO_SOCKET_IFNAME=lo), ``node_not_started`` (rank 1 never
started), ``wrong_master`` (rank 1's MASTER_ADDR an address no host has), ``port_in_use`` (a listener of
another program on host1's MASTER_PORT). Prints one JSON object. Needs root (network namespaces), and
runs under ``flock /tmp/netns.lock`` beside other bed users.
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.bed import main_for, system_bed  # noqa: E402
from devtools import devstack, hang_jobs  # noqa: E402

NAMES = ["host1", "host2"]
NOWHERE = "198.18.2.99"  # no host of the bed has it


def _case(system: Any, name: str, i: int) -> dict[str, Any]:
    from cluster_health import hang_diagnoses as hangs  # Django is set up by now

    bed = system.bed
    port = devstack.free_port()
    master = bed.host("host1").address
    ranks: dict[int, str] = {0: "host1", 1: "host2"}
    env: dict[int, dict[str, str]] = {}
    holder = None
    if name == "gloo_on_loopback":
        env = {1: {"GLOO_SOCKET_IFNAME": "lo"}}
    elif name == "node_not_started":
        ranks = {0: "host1"}
    elif name == "wrong_master":
        env = {1: {"MASTER_ADDR": NOWHERE}}
    elif name == "port_in_use":
        listen = f"import socket,time; s=socket.socket(); s.bind(('0.0.0.0', {port})); s.listen(); time.sleep(600)"
        holder = bed.start_in("host1", [sys.executable, "-c", listen])
        time.sleep(1.0)
    if name == "store_firewalled":  # up before the job starts, as a firewall is
        bed._nft_table("host1", "chstore", f"tcp dport {port} drop")
    started = hang_jobs.start_init_on_bed(bed, ranks, 2, master, port, bed.workdir / f"{name}-{i}.log", env=env)
    try:
        time.sleep(1.0)
        begun = time.monotonic()
        diagnosis = hangs.request(master=f"{master}:{port}", nodes=NAMES, source="command", interval_s=1.0)
        answer = hangs.run(diagnosis, 60.0)
        seconds = round(time.monotonic() - begun, 2)
    finally:
        if name == "store_firewalled":
            bed._nft_delete(bed.host("host1").ns, "inet", "chstore")
        hang_jobs.stop(started + ([holder] if holder else []))
    first = (answer["culprits"] or [{}])[0]
    return {
        "seconds": seconds,
        "verdict": answer["verdict"],
        "culprit": [first.get("kind"), first.get("subject"), first.get("ranks")],
        "stage": (answer.get("init") or {}).get("stage"),
    }


CASES = ("store_firewalled", "gloo_on_loopback", "node_not_started", "wrong_master", "port_in_use")


def run(repeats: int = 1, database: str | None = None, limit_s: float = 900.0) -> dict:
    """Each case's answers and the median seconds to each."""
    out: dict[str, Any] = {"repeats": repeats, "cases": {}}
    with system_bed(2, limit_s, database=database) as system:
        for name in CASES:
            runs = [_case(system, name, i) for i in range(repeats)]
            out["cases"][name] = {"median_s": statistics.median(r["seconds"] for r in runs), "runs": runs}
    return out


OPTIONS: dict[str, dict] = {"--repeats": {"type": int, "default": 1}, "--database": {"default": None}}

if __name__ == "__main__":
    sys.exit(main_for(run, __doc__, OPTIONS))
