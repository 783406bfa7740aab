"""The job's rank processes on this node, found by their launch variables in /proc."""

from __future__ import annotations

import functools
import os
import socket
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# The launch variables read from a rank's environment; nothing else of it is ever read out.
LAUNCH_VARIABLES = (
    "RANK",
    "LOCAL_RANK",
    "WORLD_SIZE",
    "LOCAL_WORLD_SIZE",
    "GROUP_RANK",
    "MASTER_ADDR",
    "MASTER_PORT",
    "SLURM_JOB_ID",
    "SLURM_PROCID",
    "TORCHELASTIC_RUN_ID",
    "TORCH_FR_BUFFER_SIZE",
    "TORCH_NCCL_TRACE_BUFFER_SIZE",
    "TORCH_WORKER_SERVER_SOCKET",
    "TORCH_FR_DUMP_TEMP_FILE",
    "NCCL_RAS_ENABLE",
    "NCCL_RAS_ADDR",
)
MAX_VALUE = 256  # characters of one launch variable kept
MAX_RANKS = 256  # rank processes reported per node (a node runs a handful)
# /proc/PID/stat's state letter in the words the diagnosis uses.
STATES = {
    "R": "running",
    "S": "sleeping",
    "D": "disk wait",
    "T": "stopped",
    "t": "stopped",
    "Z": "zombie",
    "X": "gone",
    "I": "sleeping",
}


@dataclass(frozen=True)
class JobSelector:
    """Which job: its MASTER_ADDR:MASTER_PORT (a host name matches its addresses too), or its Slurm job id."""

    master_addr: str | None = None
    master_port: int | None = None
    slurm_job: str | None = None

    def __post_init__(self) -> None:
        if (self.master_addr is None) == (self.slurm_job is None):
            raise ValueError("a job is chosen by its master (ADDR:PORT) or by its Slurm job id, one of the two")
        if self.master_addr is not None and self.master_port is None:
            raise ValueError("a master needs its port (MASTER_ADDR:MASTER_PORT)")

    @classmethod
    def parse_master(cls, text: str) -> JobSelector:
        addr, sep, port = text.rpartition(":")
        if not sep or not addr or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(f"{text!r}: expected MASTER_ADDR:MASTER_PORT")
        return cls(master_addr=addr.strip("[]"), master_port=int(port))


@dataclass
class RankProcess:
    pid: int
    rank: int | None
    local_rank: int | None
    world_size: int | None
    state: str
    launch: dict[str, str] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {
            "pid": self.pid,
            "rank": self.rank,
            "local_rank": self.local_rank,
            "world_size": self.world_size,
            "state": self.state,
            "launch": self.launch,
        }


@functools.lru_cache(maxsize=64)
def _addresses(host: str) -> frozenset[str]:
    """The addresses a MASTER_ADDR names (itself, and what it resolves to)."""
    out = {host}
    try:
        out |= {str(info[4][0]) for info in socket.getaddrinfo(host, None)}
    except (OSError, UnicodeError):
        pass
    return frozenset(out)


def launch_variables(pid: int, proc_root: str = "/proc") -> dict[str, str] | None:
    """The allow-listed launch variables of a process, or None when its environment cannot be read."""
    try:
        raw = Path(proc_root, str(pid), "environ").read_bytes()
    except OSError:
        return None
    out = {}
    for entry in raw.split(b"\0"):
        name, sep, value = entry.partition(b"=")
        key = name.decode("ascii", errors="replace")
        if sep and key in LAUNCH_VARIABLES:
            out[key] = value.decode("utf-8", errors="replace")[:MAX_VALUE]
    return out


def owner(pid: int, proc_root: str = "/proc") -> int | None:
    """The uid a process runs as (its /proc entry's owner), or None when it is gone."""
    try:
        return os.stat(Path(proc_root, str(pid))).st_uid
    except OSError:
        return None


def process_state(pid: int, proc_root: str = "/proc") -> str:
    """running, sleeping, disk wait, stopped, zombie, or gone."""
    try:
        stat = Path(proc_root, str(pid), "stat").read_text()
    except OSError:
        return "gone"
    return STATES.get(stat.rsplit(")", 1)[1].split()[0], "unknown")


def _number(value: str | None) -> int | None:
    return int(value) if value is not None and value.isdigit() else None


def find_ranks(selector: JobSelector, proc_root: str = "/proc") -> list[RankProcess]:
    """The processes of the job on this node that carry a RANK: its ranks (the launcher has none)."""
    wanted_addrs = _addresses(selector.master_addr) if selector.master_addr else frozenset()
    found = []
    for entry in sorted(os.listdir(proc_root), key=lambda e: (not e.isdigit(), int(e) if e.isdigit() else 0)):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        launch = launch_variables(int(entry), proc_root)
        if not launch or "RANK" not in launch:
            continue
        if selector.slurm_job is not None:
            if launch.get("SLURM_JOB_ID") != selector.slurm_job:
                continue
        elif _number(launch.get("MASTER_PORT")) != selector.master_port or not (
            _addresses(launch.get("MASTER_ADDR", "")) & wanted_addrs
        ):
            continue
        found.append(
            RankProcess(
                pid=int(entry),
                rank=_number(launch.get("RANK")),
                local_rank=_number(launch.get("LOCAL_RANK")),
                world_size=_number(launch.get("WORLD_SIZE")),
                state=process_state(int(entry), proc_root),
                launch=launch,
            )
        )
        if len(found) >= MAX_RANKS:
            break
    return found
