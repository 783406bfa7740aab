"""``python -m agents.hangs.inspect (--master ADDR:PORT | --slurm-job ID) [--interval S]``: one node's
view of a job, as bounded JSON on standard output.

The small separate helper the agent starts for an ``inspect`` command: it reads other users'
processes (their launch variables, stacks and sockets), so it needs ptrace rights over them,
which the resident agent never holds. Each rank is sampled twice, ``--interval`` apart, so
a rank that is moving (its stack or its bytes changed) is told from one that is stuck.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from typing import Any

from agents.hangs import procs, sockets, stacks

MAX_OUTPUT_BYTES = 512 * 1024


def _sample(ranks: list[procs.RankProcess]) -> dict[int, dict[str, Any]]:
    conns = sockets.connections({r.pid for r in ranks})
    out = {}
    for r in ranks:
        dumped = stacks.dump(r.pid)
        threads = dumped.get("threads") or []
        out[r.pid] = {
            "state": procs.process_state(r.pid),
            "threads": threads,
            "stack_error": dumped.get("error"),
            "where": stacks.where(threads),
            "connections": conns.get(r.pid, []),
        }
    return out


def _moved(first: dict[str, Any], second: dict[str, Any]) -> bool:
    """Whether a rank did anything between two samples: another place in its code, or bytes moved."""
    if first["where"] != second["where"]:
        return True

    def received(sample: dict[str, Any]) -> dict[tuple[str, str], int | None]:
        return {(c["local"], c["peer"]): c.get("bytes_received") for c in sample["connections"]}

    before, after = received(first), received(second)
    return any(after[k] != before[k] for k in after.keys() & before.keys())


def inspect(selector: procs.JobSelector, interval_s: float = 2.0) -> dict[str, Any]:
    """This node's ranks of the job: identity, state, stacks, connections, and whether each moved."""
    ranks = procs.find_ranks(selector)
    first = _sample(ranks)
    time.sleep(interval_s if ranks else 0)
    second = _sample(ranks)
    out = []
    for r in ranks:
        a, b = first[r.pid], second[r.pid]
        out.append({**r.as_dict(), **b, "state": b["state"], "moved": _moved(a, b) if b["state"] != "gone" else False})
    return {"ranks": out, "interval_s": interval_s}


HELPER_TIMEOUT_S = 60.0


def inspect_job(cmd: dict[str, Any]) -> list[dict[str, Any]]:
    """Run this module as its own process for one inspect command (agents.hangs.contract) and return
    the ranks it found: the agent never reads other users' processes itself."""
    target = ["--master", f"{cmd['master_addr']}:{cmd['master_port']}"] if cmd["master_addr"] else []
    target = target or ["--slurm-job", str(cmd["slurm_job"])]
    run = subprocess.run(
        [sys.executable, "-m", "agents.hangs.inspect", *target, "--interval", str(cmd["interval_s"])],
        capture_output=True,
        text=True,
        timeout=HELPER_TIMEOUT_S,
        check=False,
    )
    if run.returncode != 0:
        raise ValueError((run.stderr.strip().splitlines() or ["the inspect helper failed"])[-1][:500])
    ranks: list[dict[str, Any]] = json.loads(run.stdout)["ranks"]
    return ranks


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m agents.hangs.inspect", description=__doc__.splitlines()[0])
    chosen = parser.add_mutually_exclusive_group(required=True)
    chosen.add_argument("--master", metavar="ADDR:PORT", help="the job's MASTER_ADDR:MASTER_PORT")
    chosen.add_argument("--slurm-job", metavar="ID", help="the job's SLURM_JOB_ID")
    parser.add_argument("--interval", type=float, default=2.0, help="seconds between the two samples")
    args = parser.parse_args(argv)
    try:
        selector = (
            procs.JobSelector.parse_master(args.master) if args.master else procs.JobSelector(slurm_job=args.slurm_job)
        )
    except ValueError as exc:
        parser.error(str(exc))
    if not 0.0 <= args.interval <= 30.0:
        parser.error("--interval: between 0 and 30 seconds")
    text = json.dumps(inspect(selector, args.interval), separators=(",", ":"))
    if len(text) > MAX_OUTPUT_BYTES:  # stacks of many threads: keep identities, states and places
        report = json.loads(text)
        for rank in report["ranks"]:
            rank["threads"] = [t for t in rank["threads"] if t["thread"] == "MainThread"]
        text = json.dumps(report, separators=(",", ":"))[:MAX_OUTPUT_BYTES]
    sys.stdout.write(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
