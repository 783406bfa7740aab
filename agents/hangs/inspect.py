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
import os
import socket
import subprocess
import sys
import threading
import time
from typing import Any

from agents.hangs import flight, procs, ras, sockets, stacks

MAX_OUTPUT_BYTES = 512 * 1024
DEAD_STATES = ("stopped", "zombie", "gone", "disk wait")
FLIGHT_BUDGET_S = 10.0  # per sample, for every rank's Flight Recorder together (one may take 5 s)


def _flight(r: procs.RankProcess, state: str, until: float) -> dict[str, Any] | None:
    """The rank's Flight Recorder summary, unless the rank cannot answer or this sample's time for them is spent."""
    if state in DEAD_STATES:  # a stopped or dead rank's worker server cannot answer: it would cost the deadline
        return None
    if time.monotonic() > until:
        return {"error": f"not read: this sample's {FLIGHT_BUDGET_S:.0f} s for Flight Recorders were spent"}
    return flight.read(r.pid, r.rank, r.launch)


def _sample(ranks: list[procs.RankProcess]) -> dict[int, dict[str, Any]]:
    conns = sockets.connections({r.pid for r in ranks})
    out = {}
    until = time.monotonic() + FLIGHT_BUDGET_S
    for r in ranks:
        state = procs.process_state(r.pid)
        dumped = stacks.dump(r.pid)
        threads = dumped.get("threads") or []
        out[r.pid] = {
            "state": state,
            "threads": threads,
            "stack_error": dumped.get("error"),
            "where": stacks.where(threads),
            "connections": conns.get(r.pid, []),
            "flight": _flight(r, state, until),
        }
    return out


def _completed(summary: dict[str, Any] | None) -> Any:
    """What a rank's Flight Recorder says it finished (None without one): it moved if that changed."""
    return None if not summary or "error" in summary else [g["last_completed"] for g in summary["groups"]]


def _moved(first: dict[str, Any], second: dict[str, Any]) -> bool:
    """Whether a rank did anything between two samples: another place in its code, or bytes moved."""
    # A sample whose stack could not be read says nothing of where the rank is (it is not a move).
    if first["where"] != second["where"] and not (first.get("stack_error") or second.get("stack_error")):
        return True
    done = _completed(first.get("flight")), _completed(second.get("flight"))
    if None not in done and done[0] != done[1]:  # read both times (one failed read is not a move)
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
    # NCCL RAS, once per port the ranks name (it answers for the whole job), when something answers there.
    pids = {r.pid for r in ranks}
    ports = {port for r in ranks if (port := ras.port_of(r.launch)) is not None}
    views: dict[int | None, dict[str, Any] | None] = {port: ras.query(port, pids) for port in ports}
    for rank, r in zip(out, ranks, strict=True):
        rank["ras"] = views.get(ras.port_of(r.launch))
    return {"ranks": out, "interval_s": interval_s}


HELPER_TIMEOUT_S = 60.0
MAX_REQUEST_BYTES = 1024
# Where the privileged helper listens on a deployed node (deploy/systemd/cluster-health-inspect.socket).
SOCKET_ENV = "CLUSTER_HEALTH_INSPECT_SOCKET"


def _selector(request: dict[str, Any]) -> procs.JobSelector:
    """A job selector from a request's fields, refusing anything else (the helper's whole interface)."""
    if set(request) - {"master_addr", "master_port", "slurm_job", "interval_s"}:
        raise ValueError("unexpected fields in the request")
    if request.get("slurm_job") is not None:
        return procs.JobSelector(slurm_job=str(request["slurm_job"])[:64])
    return procs.JobSelector(master_addr=str(request.get("master_addr"))[:253], master_port=int(request["master_port"]))


def _request(cmd: dict[str, Any]) -> dict[str, Any]:
    keys = ("master_addr", "master_port", "slurm_job", "interval_s")
    return {k: cmd[k] for k in keys if cmd.get(k) is not None}


def inspect_job(cmd: dict[str, Any]) -> list[dict[str, Any]]:
    """The ranks of the job an inspect command (agents.hangs.contract) names, read by the helper: the
    privileged one behind CLUSTER_HEALTH_INSPECT_SOCKET on a deployed node, else this module run as its
    own process. The agent never reads other users' processes itself."""
    path = os.environ.get(SOCKET_ENV)
    if path:
        return _ask_socket(path, _request(cmd))
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


def _ask_socket(path: str, request: dict[str, Any]) -> list[dict[str, Any]]:
    """One request line to the helper's socket, its JSON answer back (bounded, with a deadline)."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
        conn.settimeout(HELPER_TIMEOUT_S)
        conn.connect(path)
        conn.sendall(json.dumps(request).encode() + b"\n")
        conn.shutdown(socket.SHUT_WR)
        chunks, size = [], 0
        while chunk := conn.recv(65536):
            chunks.append(chunk)
            size += len(chunk)
            if size > MAX_OUTPUT_BYTES + 1024:
                raise ValueError("the inspect helper answered more than its bound")
    answer = json.loads(b"".join(chunks) or b"{}")
    if "error" in answer:
        raise ValueError(str(answer["error"])[:500])
    ranks: list[dict[str, Any]] = answer["ranks"]
    return ranks


def _answer(line: bytes) -> str:
    """The helper's whole interface: one JSON request line (a job selector and an interval) in, one
    bounded JSON answer out; a request with anything else is refused with the reason."""
    try:
        request = json.loads(line)
        if not isinstance(request, dict):
            raise ValueError("expected a JSON object")
        selector = _selector(request)
        interval = float(request.get("interval_s", 2.0))
        if not 0.0 <= interval <= 10.0:
            raise ValueError("interval_s: between 0 and 10")
        return _bounded_text(inspect(selector, interval))
    except (ValueError, TypeError, KeyError) as exc:
        return json.dumps({"error": f"bad request: {exc}"})


def serve_stdio() -> int:
    """One request on standard input, its answer on standard output: how systemd's socket activation
    (Accept=yes) runs the helper for each connection, with the privileges its unit grants."""
    sys.stdout.write(_answer(sys.stdin.buffer.readline(MAX_REQUEST_BYTES)) + "\n")
    return 0


MAX_CONNECTIONS = 4


def serve_socket(path: str) -> int:
    """Listen on a Unix socket and answer each connection as ``--stdio`` does, at most MAX_CONNECTIONS
    at a time: the helper as a container of its own beside the agent's (deploy/kubernetes), the socket
    on a volume only the two share."""
    if os.path.exists(path):
        os.unlink(path)
    slots = threading.BoundedSemaphore(MAX_CONNECTIONS)
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as server:
        server.bind(path)
        os.chmod(path, 0o660)
        server.listen(MAX_CONNECTIONS)
        while True:
            conn, _ = server.accept()
            if not slots.acquire(blocking=False):
                conn.close()  # as systemd's MaxConnections does
                continue
            threading.Thread(target=_serve_one, args=(conn, slots), daemon=True).start()


def _serve_one(conn: socket.socket, slots: threading.BoundedSemaphore) -> None:
    try:
        with conn:
            conn.settimeout(HELPER_TIMEOUT_S)
            with conn.makefile("rb") as requests:
                line = requests.readline(MAX_REQUEST_BYTES)
            conn.sendall(_answer(line).encode() + b"\n")
    except OSError:
        pass
    finally:
        slots.release()


def _bounded_text(report: dict[str, Any]) -> str:
    text = json.dumps(report, separators=(",", ":"))
    if len(text) > MAX_OUTPUT_BYTES:  # stacks of many threads: keep identities, states and places
        for rank in report["ranks"]:
            rank["threads"] = [t for t in rank["threads"] if t["thread"] == "MainThread"]
        text = json.dumps(report, separators=(",", ":"))[:MAX_OUTPUT_BYTES]
    return text


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m agents.hangs.inspect", description=__doc__.splitlines()[0])
    chosen = parser.add_mutually_exclusive_group(required=True)
    chosen.add_argument("--stdio", action="store_true", help="one JSON request on stdin (systemd socket activation)")
    chosen.add_argument("--listen", metavar="PATH", help="answer requests on this Unix socket (a helper container)")
    chosen.add_argument("--master", metavar="ADDR:PORT", help="the job's MASTER_ADDR:MASTER_PORT")
    chosen.add_argument("--slurm-job", metavar="ID", help="the job's SLURM_JOB_ID")
    parser.add_argument("--interval", type=float, default=2.0, help="seconds between the two samples")
    args = parser.parse_args(argv)
    if args.stdio:
        return serve_stdio()
    if args.listen:
        return serve_socket(args.listen)
    try:
        selector = (
            procs.JobSelector.parse_master(args.master) if args.master else procs.JobSelector(slurm_job=args.slurm_job)
        )
    except ValueError as exc:
        parser.error(str(exc))
    if not 0.0 <= args.interval <= 30.0:
        parser.error("--interval: between 0 and 30 seconds")
    text = _bounded_text(inspect(selector, args.interval))
    sys.stdout.write(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
