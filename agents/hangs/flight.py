"""A rank's Flight Recorder entries (``TORCH_FR_BUFFER_SIZE``), read from outside, validated and summed
up to what the diagnosis matches ranks by: per process group, the last collective enqueued and the last
completed (sequence numbers), the first one the rank entered and has not completed, and its last completed
collectives with when it enqueued each (a straggler is the rank that enqueues last: core/stragglers.py).

Where torch 2.13 lets another process read them (it records Gloo as well as NCCL):

- the rank's worker server, a Unix socket named by ``TORCH_WORKER_SERVER_SOCKET`` in its environment
  (torchelastic's ``worker_main()`` starts it): ``POST /handler/fr_trace_json``;
- a JSON dump the job wrote at ``TORCH_FR_DUMP_TEMP_FILE`` + its rank (a pickle dump is never read:
  unpickling what a job wrote runs its code).

Torch writes no dump of its own for Gloo (only NCCL's watchdog does, as a pickle) and starts no worker
server unless the job asks for one: without either, the stacks stand alone. Both paths come from the
job's environment, so they are read as the rank sees them (``/proc/PID/root``), only when the rank's
own user owns them, bounded in size and time, and what comes back is checked field by field.
"""

from __future__ import annotations

import functools
import json
import os
import socket
import stat
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

SOCKET_VARIABLE = "TORCH_WORKER_SERVER_SOCKET"
DUMP_VARIABLE = "TORCH_FR_DUMP_TEMP_FILE"
MAX_BYTES = 4 * 1024 * 1024  # one rank's dump (a ring buffer of a few thousand entries)
MAX_ENTRIES = 20000
MAX_GROUPS = 256
RECENT = 64  # completed collectives kept per rank, with their times (a straggler's steps: core/stragglers.py)
DEADLINE_S = 5.0
_OP_CHARS = 80


class FlightError(ValueError):
    """The dump could not be read, or is not Flight Recorder's JSON."""


def _open_as_rank_sees_it(path: str, pid: int, proc_root: str) -> tuple[int, os.stat_result]:
    """An O_PATH descriptor of the path as the rank sees it (from ``/proc/PID/root``) and its fstat, walked
    one component at a time with O_NOFOLLOW: no folder on the way is a symbolic link, a last one that is
    stays the link itself (callers then find no socket or file), and nothing can be swapped between the
    check and the use. Refused unless the rank's own user owns what it names."""
    if not path.startswith("/") or len(path) > 255 or "\0" in path:
        raise FlightError(f"{path[:80]!r}: not an absolute path")
    parts = path.split("/")[1:]
    if any(part in ("", ".", "..") for part in parts):
        raise FlightError(f"{path[:80]!r}: not an absolute path")
    owner = os.stat(Path(proc_root, str(pid))).st_uid
    fd = os.open(f"{proc_root}/{pid}/root", os.O_PATH | os.O_DIRECTORY)
    try:
        for i, part in enumerate(parts):
            last = i == len(parts) - 1
            flags = os.O_PATH | os.O_NOFOLLOW | (0 if last else os.O_DIRECTORY)
            try:
                step = os.open(part, flags, dir_fd=fd)
            except NotADirectoryError:
                raise FlightError(f"{path[:80]!r}: {part[:40]!r} is a symbolic link or not a folder") from None
            os.close(fd)
            fd = step
        info = os.fstat(fd)
    except BaseException:
        os.close(fd)
        raise
    if info.st_uid != owner:
        os.close(fd)
        raise FlightError(f"{path[:80]!r}: not owned by the rank's user")
    return fd, info


def _from_socket(path: str, pid: int, proc_root: str) -> bytes:
    fd, info = _open_as_rank_sees_it(path, pid, proc_root)
    try:
        if not stat.S_ISSOCK(info.st_mode):
            raise FlightError(f"{path[:80]!r}: not a socket")
        deadline = time.monotonic() + DEADLINE_S
        # Through the socket's own descriptor: the very inode checked, and an address within 107 bytes.
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
            conn.settimeout(DEADLINE_S)
            conn.connect(f"/proc/self/fd/{fd}")
            return _receive(conn, deadline)
    finally:
        os.close(fd)


def _receive(conn: socket.socket, deadline: float) -> bytes:
    """An HTTP/1.0 answer's body, bounded in size and time."""
    conn.sendall(b"POST /handler/fr_trace_json HTTP/1.0\r\nHost: localhost\r\nContent-Length: 0\r\n\r\n")
    chunks, size = [], 0
    while chunk := conn.recv(65536):
        chunks.append(chunk)
        size += len(chunk)
        if size > MAX_BYTES + 4096:
            raise FlightError("the worker server answered more than its bound")
        if time.monotonic() > deadline:
            raise FlightError(f"the worker server did not answer within {DEADLINE_S:.0f} s")
        conn.settimeout(max(0.1, deadline - time.monotonic()))
    head, _, body = b"".join(chunks).partition(b"\r\n\r\n")
    status = head.split(b"\r\n", 1)[0]
    if not status.startswith(b"HTTP/1.") or b" 200" not in status:
        raise FlightError(f"the worker server answered {status[:60].decode('ascii', 'replace')!r}")
    return body


def _from_file(prefix: str, rank: int, pid: int, proc_root: str) -> bytes:
    path = f"{prefix}{rank}"
    found, info = _open_as_rank_sees_it(path, pid, proc_root)
    try:
        if not stat.S_ISREG(info.st_mode) or info.st_size > MAX_BYTES:
            raise FlightError(f"{path[:80]!r}: not a regular file within {MAX_BYTES} bytes")
        fd = os.open(f"/proc/self/fd/{found}", os.O_RDONLY | os.O_NONBLOCK)  # the inode checked, read
    finally:
        os.close(found)
    with os.fdopen(fd, "rb") as f:
        data = f.read(MAX_BYTES + 1)
    if not data.lstrip().startswith(b"{"):
        raise FlightError(f"{path[:80]!r}: not a JSON dump (a pickle is never read)")
    return data


def _int(value: Any, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise FlightError(f"{name}: expected an integer")
    try:
        number = int(value)
    except ValueError:
        raise FlightError(f"{name}: expected an integer") from None
    if not -1 <= number < 2**62:
        raise FlightError(f"{name}: out of range")
    return number


def _text(value: Any, limit: int = _OP_CHARS) -> str:
    return "".join(c for c in str(value) if c.isprintable())[:limit]


def _entry(raw: Any) -> dict[str, Any]:
    if not isinstance(raw, dict):
        raise FlightError("entries: expected objects")
    group = raw.get("process_group")
    name = _text(group[0]) if isinstance(group, list) and group else _text(raw.get("pg_id"))
    p2p = bool(raw.get("is_p2p"))
    seq = _int(raw.get("p2p_seq_id" if p2p else "collective_seq_id", 0), "collective_seq_id")
    op = _text(raw.get("profiling_name", "?")).rpartition(":")[2] or "?"
    sizes = raw.get("input_sizes")
    return {
        "record": _int(raw.get("record_id", 0), "record_id"),
        "pg": _int(raw.get("pg_id", 0), "pg_id"),
        "group": name,
        "desc": _text(group[1]) if isinstance(group, list) and len(group) > 1 else "",
        "seq": seq,
        "p2p": p2p,
        "op": op,
        "sizes": _text(json.dumps(sizes), 120) if isinstance(sizes, list) else None,
        "completed": raw.get("state") == "completed" or raw.get("retired") is True,
        "created_ns": _int(raw.get("time_created_ns", 0), "time_created_ns"),
        # NCCL's watchdog notes when it saw the work complete; Gloo leaves it 0 (None here).
        "completed_ns": _int(raw.get("time_discovered_completed_ns", 0), "time_discovered_completed_ns") or None,
    }


def summarize(doc: Any) -> dict[str, Any]:
    """Flight Recorder's JSON dump (``fr_trace_json``, version 2.x) as {"version", "groups": [{"pg", "group",
    "last_enqueued", "last_completed"}], "pending": entry | None, "last_completed": entry | None, "recent":
    [{"pg", "seq", "op", "created_ns", "completed_ns"}]}: what the rank entered and did not finish (the first
    such), the last collective it finished, and the last RECENT collectives it finished (not point-to-point)
    with when it enqueued each and, where torch noted it, when it completed."""
    if not isinstance(doc, dict) or not isinstance(doc.get("entries", []), list):
        raise FlightError("not a Flight Recorder dump (an object with entries)")
    raw_entries = doc.get("entries") or []
    if len(raw_entries) > MAX_ENTRIES:
        raise FlightError(f"entries: more than {MAX_ENTRIES}")
    entries = sorted((_entry(e) for e in raw_entries), key=lambda e: e["record"])
    status = doc.get("pg_status") or {}
    if not isinstance(status, dict) or len(status) > MAX_GROUPS:
        raise FlightError(f"pg_status: expected an object of at most {MAX_GROUPS} groups")
    names = {e["pg"]: e["group"] for e in entries}
    groups = []
    for pg, counters in sorted(status.items(), key=lambda kv: _int(kv[0], "pg_status")):
        if not isinstance(counters, dict):
            raise FlightError("pg_status: expected objects")
        groups.append(
            {
                "pg": _int(pg, "pg_status"),
                "group": names.get(_int(pg, "pg_status"), _text(pg)),
                "last_enqueued": _int(counters.get("last_enqueued_collective", -1), "last_enqueued_collective"),
                "last_completed": _int(counters.get("last_completed_collective", -1), "last_completed_collective"),
            }
        )
    pending = next((e for e in entries if not e["completed"]), None)
    done = [e for e in entries if e["completed"]]
    return {
        "version": _text(doc.get("version", ""), 16),
        "entries": len(entries),
        "groups": groups,
        "pending": pending,
        "last_completed": done[-1] if done else None,
        "recent": [{k: e[k] for k in ("pg", "seq", "op", "created_ns", "completed_ns")} for e in done if not e["p2p"]][
            -RECENT:
        ],
    }


def read(pid: int, rank: int | None, launch: dict[str, str], proc_root: str = "/proc") -> dict[str, Any] | None:
    """The rank's Flight Recorder summary ({"source", ...}), {"error": why} when it is there but unreadable,
    or None when the job exposes none (no worker server socket, no JSON dump)."""
    sources: list[tuple[str, Callable[[], bytes]]] = []
    if launch.get(SOCKET_VARIABLE):
        sources.append(("worker server", functools.partial(_from_socket, launch[SOCKET_VARIABLE], pid, proc_root)))
    if launch.get(DUMP_VARIABLE) and rank is not None:
        sources.append(("dump file", functools.partial(_from_file, launch[DUMP_VARIABLE], rank, pid, proc_root)))
    errors = []
    for source, fetch in sources:
        try:
            body = fetch()
            if len(body) > MAX_BYTES:
                raise FlightError(f"more than {MAX_BYTES} bytes")
            return {"source": source, **summarize(json.loads(body))}
        except FileNotFoundError:
            continue
        except (OSError, ValueError, RecursionError) as exc:  # FlightError and bad JSON are ValueErrors
            errors.append(f"{source}: {_text(exc, 200)}")
    return {"error": "; ".join(errors)} if errors else None
