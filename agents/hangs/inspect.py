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
import pwd
import socket
import struct
import subprocess
import sys
import threading
import time
from typing import Any

from agents.hangs import flight, groups, listeners, procs, ras, sockets, stacks

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
    held = listeners.listening() if ranks else []
    addresses = listeners.interfaces() if ranks else {}
    out = {}
    until = time.monotonic() + FLIGHT_BUDGET_S
    for r in ranks:
        state = procs.process_state(r.pid)
        dumped = stacks.dump(r.pid)
        threads = dumped.get("threads") or []
        sample: dict[str, Any] = {
            "state": state,
            "threads": threads,
            "stack_error": dumped.get("error"),
            "where": stacks.where(threads),
            "connections": conns.get(r.pid, []),
            "flight": _flight(r, state, until) if r.role is None else None,
        }
        init = _init(r, threads, conns.get(r.pid, []), [h for h in held if h["pid"] == r.pid], addresses)
        if init is not None:
            sample["init"] = init
        out[r.pid] = sample
    return out


def _master_of(r: procs.RankProcess) -> tuple[str, int | None]:
    """The store (or rendezvous endpoint) a rank or launcher connects to."""
    if r.role == "launcher":
        host, _, port = r.launch.get("endpoint", "").rpartition(":")
        return host, int(port) if port.isdigit() else None
    port = r.launch.get("MASTER_PORT", "")
    return r.launch.get("MASTER_ADDR", ""), int(port) if port.isdigit() else None


def _init(
    r: procs.RankProcess,
    threads: list[dict[str, Any]],
    conns: list[dict[str, Any]],
    held: list[dict[str, Any]],
    addresses: dict[str, str],
) -> dict[str, Any] | None:
    """Where a rank (or launcher) waits at init, when it does: {"stage": store_connect | store_wait |
    pair_connect | rendezvous, "function", "peer": the address it tries, "peer_state": syn-sent |
    established | none, "listening": the addresses it listens on, "interface": the one its connection to
    the store leaves by}. The stack gives the stage, the sockets the store's side and the peer."""
    found = stacks.init_stage(threads)
    if found is None:
        return None
    master, port = _master_of(r)
    listening = sorted({f"{h['address']}:{h['port']}" for h in held})[:16]
    # The store's server: its listener, or where sockets cannot be listed (no ss), as torch decides it: rank 0
    # unless torchrun's agent serves it, a static rendezvous's node rank 0.
    serves_store = any(h["port"] == port for h in held) or (
        r.launch.get("node_rank") == "0" and r.launch.get("rdzv_backend") == "static"
        if r.role == "launcher"
        else r.rank == 0 and r.launch.get("TORCHELASTIC_USE_AGENT_STORE", "").lower() != "true"
    )
    to_store = [c for c in conns if c["peer"].rpartition(":")[2] == str(port)]
    stage, peer = found["stage"], None
    if stage == "store":
        stage = "store_wait" if serves_store else "store_connect"
    if stage in ("store_connect", "rendezvous") and not serves_store:
        peer = f"{master}:{port}"
    elif stage == "pair_connect":
        trying = [c for c in conns if c["state"] == "syn-sent" and c not in to_store]
        peer = trying[0]["peer"] if trying else None
    mine = [c for c in conns if peer is not None and c["peer"] == peer] or (to_store if peer else [])
    local = next((c["local"].rpartition(":")[0] for c in to_store if c["state"] != "syn-sent"), None)
    return {
        "stage": stage,
        "function": found["function"],
        "peer": peer,
        "peer_state": mine[0]["state"] if mine else ("none" if peer else None),
        "serves_store": serves_store,
        "listening": listening,
        "interface": addresses.get(local or ""),
    }


def _completed(summary: dict[str, Any] | None) -> Any:
    """What a rank's Flight Recorder says it finished (None without one): it moved if that changed."""
    return None if not summary or "error" in summary else [g["last_completed"] for g in summary["groups"]]


def _moved(first: dict[str, Any], second: dict[str, Any]) -> bool:
    """Whether a rank did anything between two samples: another place in its code, or bytes moved."""
    # A sample whose stack could not be read says nothing of where the rank is (it is not a move).
    if first["where"] != second["where"] and not (first.get("stack_error") or second.get("stack_error")):
        return True
    if first.get("init") and (first.get("init") or {}).get("stage") == (second.get("init") or {}).get("stage"):
        return False  # at one init stage in both: a store's keep-alive traffic is not progress
    done = _completed(first.get("flight")), _completed(second.get("flight"))
    if None not in done and done[0] != done[1]:  # read both times (one failed read is not a move)
        return True

    def received(sample: dict[str, Any]) -> dict[tuple[str, str], int | None]:
        return {(c["local"], c["peer"]): c.get("bytes_received") for c in sample["connections"]}

    before, after = received(first), received(second)
    return any(after[k] != before[k] for k in after.keys() & before.keys())


def inspect(selector: procs.JobSelector, interval_s: float = 2.0) -> dict[str, Any]:
    """This node's ranks of the job: identity, state, stacks, connections, and whether each moved; and at
    init, its launchers, ranks pointing at another master, and who else holds the master's port."""
    return _inspect_ranks(procs.find_ranks(selector), interval_s, selector)


def _job_processes(selector: procs.JobSelector | None) -> list[procs.RankProcess]:
    """The job's launchers and the ranks with its MASTER_PORT and another MASTER_ADDR (none without a master)."""
    if selector is None or selector.master_addr is None:
        return []
    return procs.find_launchers(selector) + procs.find_ranks(selector, other_master=True)


def _port_holders(
    selector: procs.JobSelector | None, job_pids: set[int], held: list[dict[str, Any]], mine: dict[str, str]
) -> list[dict[str, Any]]:
    """Listeners on the job's MASTER_PORT at its master's address on this node that are no process of the
    job (the port in use by another program), each with its owner's pid, name and uid."""
    if selector is None or selector.master_addr is None:
        return []
    master = procs._addresses(selector.master_addr)
    local = set(mine) | {a for a in master if listeners.is_loopback(a)}
    if not master & local:
        return []  # the master is another node: its agent looks
    out = []
    for h in held:
        if h["port"] != selector.master_port or h["pid"] in job_pids:
            continue
        if not (listeners.is_wildcard(h["address"]) or h["address"] in master):
            continue
        out.append({**h, "role": "listener", "uid": listeners.owner_uid(h["pid"]) if h["pid"] else None})
    return out[:8]


def _inspect_ranks(
    ranks: list[procs.RankProcess],
    interval_s: float,
    selector: procs.JobSelector | None = None,
    only_uid: int | None = None,
) -> dict[str, Any]:
    """With ``only_uid`` (a caller that is neither root nor the agent), the launchers, other-master ranks
    and port holders of other users are left out: it reads only its own processes."""
    others = [r for r in _job_processes(selector) if only_uid is None or procs.owner(r.pid) == only_uid]
    everyone = ranks + others
    first = _sample(everyone)
    time.sleep(interval_s if everyone else 0)
    second = _sample(everyone)
    out = []
    for r in everyone:
        a, b = first[r.pid], second[r.pid]
        moved = _moved(a, b) if b["state"] != "gone" else False
        # Where it was in each sample: a straggler is the one rank in its own code in every sample (core/stragglers.py).
        out.append({**r.as_dict(), **b, "state": b["state"], "moved": moved, "samples": [a["where"], b["where"]]})
        if b["where"].get("collective") and not moved:  # the group it waits on, by its code's names (groups.py)
            out[-1]["groups"] = groups.read(r.pid)
    # NCCL RAS, once per port the ranks name (it answers for the whole job), when something answers there.
    pids = {r.pid for r in ranks}
    ports = {port for r in ranks if (port := ras.port_of(r.launch)) is not None}
    views: dict[int | None, dict[str, Any] | None] = {port: ras.query(port, pids) for port in ports}
    for rank, r in zip(out, ranks, strict=False):
        rank["ras"] = views.get(ras.port_of(r.launch))
    job_pids = {r.pid for r in everyone} | {c for r in everyone if r.role for c in procs.children(r.pid)}
    holders = _port_holders(selector, job_pids, listeners.listening(), listeners.interfaces())
    holders = [h for h in holders if only_uid is None or h["uid"] == only_uid]
    report: dict[str, Any] = {"ranks": out[: len(ranks)], "interval_s": interval_s}
    report["launchers"] = [e for e in out[len(ranks) :] if e.get("role") == "launcher"]
    report["other_master"] = [e for e in out[len(ranks) :] if e.get("role") is None]
    report["listeners"] = holders
    return report


def entries(report: dict[str, Any]) -> list[dict[str, Any]]:
    """A node's report as the agent sends it: its ranks, then its launchers ("role": "launcher"), the ranks
    with another master ("master_differs") and the other holders of the master's port ("role": "listener")."""
    return [
        *report.get("ranks", []),
        *report.get("launchers", []),
        *report.get("other_master", []),
        *report.get("listeners", []),
    ]


HELPER_TIMEOUT_S = 60.0
REQUEST_TIMEOUT_S = 5.0  # a caller that sends no request line within this holds no slot longer
MAX_REQUEST_BYTES = 1024
# Where the privileged helper listens on a deployed node (deploy/systemd/cluster-health-inspect.socket).
SOCKET_ENV = "CLUSTER_HEALTH_INSPECT_SOCKET"
# The agent's user (a name: systemd's DynamicUser gets its uid at start), answered for any job as root is;
# --agent-user, or this variable.
AGENT_USER_ENV = "CLUSTER_HEALTH_INSPECT_AGENT_USER"


class CallerRefused(ValueError):
    """The caller may not read this job: neither root, the agent's user, nor the owner of its ranks."""


def peer_uid(conn: socket.socket) -> int:
    """The uid of the process at the other end of a Unix socket, as the kernel recorded it (SO_PEERCRED)."""
    _, uid, _ = struct.unpack("3i", conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i")))
    return int(uid)


def trusted_caller(uid: int, agent_user: str | None) -> bool:
    """Root, or the agent's user (by name): answered for any job on this node."""
    if uid == 0:
        return True
    name = (agent_user or "").strip()
    if not name:
        return False
    try:
        return pwd.getpwnam(name).pw_uid == uid
    except KeyError:  # a DynamicUser exists only while its unit runs
        return False


def _authorize(caller_uid: int | None, agent_user: str | None, ranks: list[procs.RankProcess]) -> None:
    """Refuse a caller that is not trusted and does not own every rank asked about (None: no socket peer,
    the process that started this helper, which reads only what its own privileges let it)."""
    if caller_uid is None or trusted_caller(caller_uid, agent_user):
        return
    if any(procs.owner(r.pid) != caller_uid for r in ranks):
        raise CallerRefused(f"uid {caller_uid} is not the owner of this job's ranks")


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
    return entries(json.loads(run.stdout))


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
    return entries(answer)


def _answer(line: bytes, caller_uid: int | None = None, agent_user: str | None = None) -> str:
    """The helper's whole interface: one JSON request line (a job selector and an interval) in, one
    bounded JSON answer out; a request with anything else is refused with the reason, and so is a
    caller other than root, the agent's user or the owner of the job's ranks (``caller_uid``)."""
    try:
        request = json.loads(line)
        if not isinstance(request, dict):
            raise ValueError("expected a JSON object")
        selector = _selector(request)
        interval = float(request.get("interval_s", 2.0))
        if not 0.0 <= interval <= 10.0:
            raise ValueError("interval_s: between 0 and 10")
        ranks = procs.find_ranks(selector)
        _authorize(caller_uid, agent_user, ranks)
        trusted = caller_uid is None or trusted_caller(caller_uid, agent_user)
        return _bounded_text(_inspect_ranks(ranks, interval, selector, None if trusted else caller_uid))
    except CallerRefused as exc:
        return json.dumps({"error": f"refused: {exc}"})
    except (ValueError, TypeError, KeyError) as exc:
        return json.dumps({"error": f"bad request: {exc}"})


def _stdin_request() -> tuple[bytes, int | None]:
    """The request line and the caller's uid: when standard input is the connection (socket activation),
    its peer, and a caller silent for REQUEST_TIMEOUT_S gets nothing (it holds no slot); else None, the
    process that started the helper."""
    fd = os.dup(0)
    try:
        conn = socket.socket(fileno=fd)
    except OSError:  # not a socket
        os.close(fd)
        return sys.stdin.buffer.readline(MAX_REQUEST_BYTES), None
    with conn:
        caller = peer_uid(conn)
        conn.settimeout(REQUEST_TIMEOUT_S)
        with conn.makefile("rb") as requests:
            return requests.readline(MAX_REQUEST_BYTES), caller


def serve_stdio(agent_user: str | None = None) -> int:
    """One request on standard input, its answer on standard output: how systemd's socket activation
    (Accept=yes) runs the helper for each connection, with the privileges its unit grants."""
    try:
        line, caller = _stdin_request()
    except OSError:  # the caller sent no line in time, or went away
        return 0
    sys.stdout.write(_answer(line, caller, agent_user) + "\n")
    return 0


MAX_CONNECTIONS = 4


def serve_socket(path: str, agent_user: str | None = None) -> int:
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
            threading.Thread(target=_serve_one, args=(conn, slots, agent_user), daemon=True).start()


def _serve_one(conn: socket.socket, slots: threading.BoundedSemaphore, agent_user: str | None) -> None:
    try:
        with conn:
            caller = peer_uid(conn)
            conn.settimeout(REQUEST_TIMEOUT_S)
            with conn.makefile("rb") as requests:
                line = requests.readline(MAX_REQUEST_BYTES)
            conn.settimeout(HELPER_TIMEOUT_S)
            conn.sendall(_answer(line, caller, agent_user).encode() + b"\n")
    except OSError:
        pass
    finally:
        slots.release()


def _bounded_text(report: dict[str, Any]) -> str:
    text = json.dumps(report, separators=(",", ":"))
    if len(text) > MAX_OUTPUT_BYTES:  # stacks of many threads: keep identities, states and places
        for rank in [*report["ranks"], *report.get("launchers", []), *report.get("other_master", [])]:
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
    parser.add_argument(
        "--agent-user",
        default=os.environ.get(AGENT_USER_ENV),
        help=f"with --stdio or --listen: the agent's user, answered for any job as root is (env {AGENT_USER_ENV})",
    )
    args = parser.parse_args(argv)
    if args.stdio:
        return serve_stdio(args.agent_user)
    if args.listen:
        return serve_socket(args.listen, args.agent_user)
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
