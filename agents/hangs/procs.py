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
    "GLOO_SOCKET_IFNAME",
    "NCCL_SOCKET_IFNAME",
    "TORCHELASTIC_USE_AGENT_STORE",
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
    # "launcher": torchrun's elastic agent of the job (its options in ``launch``); a rank's role is left out.
    role: str | None = None
    # A rank or launcher whose MASTER_PORT is the job's and whose MASTER_ADDR names another host.
    master_differs: bool = False

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "pid": self.pid,
            "rank": self.rank,
            "local_rank": self.local_rank,
            "world_size": self.world_size,
            "state": self.state,
            "launch": self.launch,
        }
        if self.role:
            out["role"] = self.role
        if self.master_differs:
            out["master_differs"] = True
        return out


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


def _pids(proc_root: str) -> list[int]:
    entries = [int(e) for e in os.listdir(proc_root) if e.isdigit()]
    return sorted(e for e in entries if e != os.getpid())


def find_ranks(selector: JobSelector, proc_root: str = "/proc", other_master: bool = False) -> list[RankProcess]:
    """The processes of the job on this node that carry a RANK: its ranks (the launcher has none).

    With ``other_master``, instead the ranks whose MASTER_PORT is the job's and whose MASTER_ADDR names
    another host (``master_differs``): a rank launched with a wrong MASTER_ADDR waits at a master that
    is not the job's, and the diagnosis names it when its RANK is one the job misses."""
    wanted_addrs = _addresses(selector.master_addr) if selector.master_addr else frozenset()
    if other_master and selector.slurm_job is not None:
        return []
    found = []
    for pid in _pids(proc_root):
        entry = str(pid)
        launch = launch_variables(int(entry), proc_root)
        if not launch or "RANK" not in launch:
            continue
        if selector.slurm_job is not None:
            if launch.get("SLURM_JOB_ID") != selector.slurm_job:
                continue
        elif _number(launch.get("MASTER_PORT")) != selector.master_port:
            continue
        elif bool(_addresses(launch.get("MASTER_ADDR", "")) & wanted_addrs) == other_master:
            continue
        found.append(
            RankProcess(
                pid=int(entry),
                rank=_number(launch.get("RANK")),
                local_rank=_number(launch.get("LOCAL_RANK")),
                world_size=_number(launch.get("WORLD_SIZE")),
                state=process_state(int(entry), proc_root),
                launch=launch,
                master_differs=other_master,
            )
        )
        if len(found) >= MAX_RANKS:
            break
    return found


# torchrun's options a launcher is known by; nothing else of its command line leaves the node (the job's
# own arguments may hold anything).
LAUNCHER_OPTIONS = {
    "master-addr": "master_addr",
    "master-port": "master_port",
    "rdzv-endpoint": "rdzv_endpoint",
    "rdzv-backend": "rdzv_backend",
    "nnodes": "nnodes",
    "node-rank": "node_rank",
    "nproc-per-node": "nproc_per_node",
}
MAX_ARGV_BYTES = 64 * 1024


def _cmdline(pid: int, proc_root: str) -> list[str]:
    try:
        raw = Path(proc_root, str(pid), "cmdline").read_bytes()[:MAX_ARGV_BYTES]
    except OSError:
        return []
    return [a.decode("utf-8", errors="replace") for a in raw.split(b"\0") if a]


def launcher_options(argv: list[str]) -> dict[str, str] | None:
    """torchrun's job options from a command line (None when it is not torchrun's): its master or
    rendezvous endpoint, nnodes, node rank and processes per node, with torchrun's defaults, and
    ``endpoint`` (HOST:PORT), where its static or c10d rendezvous meets."""
    names = [a.rsplit("/", 1)[-1] for a in argv[:3]]
    if "torchrun" in names:
        start = names.index("torchrun") + 1
    elif len(argv) > 2 and argv[1] == "-m" and argv[2] in ("torch.distributed.run", "torch.distributed.launch"):
        start = 3
    else:
        return None
    out: dict[str, str] = {}
    i = start
    while i < len(argv):
        arg = argv[i]
        if not arg.startswith("--"):
            break  # the training script: its arguments are the job's own
        name, sep, value = arg[2:].replace("_", "-").partition("=")
        if name in ("standalone", "no-python", "run-path", "module", "virtual-local-rank") or sep:
            i += 1
        else:
            value = argv[i + 1] if i + 1 < len(argv) else ""
            i += 2
        if name in LAUNCHER_OPTIONS:
            out[LAUNCHER_OPTIONS[name]] = value[:MAX_VALUE]
        elif name == "standalone":
            out["standalone"] = "1"
    out.setdefault("rdzv_backend", "static")
    out.setdefault("nnodes", "1")
    out.setdefault("node_rank", "0")
    if out.get("rdzv_endpoint") and out["rdzv_backend"] != "static":
        host, sep, port = out["rdzv_endpoint"].rpartition(":")
        out["endpoint"] = out["rdzv_endpoint"] if sep and port.isdigit() else f"{out['rdzv_endpoint']}:29400"
    else:
        out["endpoint"] = f"{out.get('master_addr', '127.0.0.1')}:{out.get('master_port', '29500')}"
    return out


def _world_of(options: dict[str, str]) -> int | None:
    nodes = _number(options.get("nnodes", "1").rpartition(":")[2])  # "1:4": elastic, at most 4
    per_node = _number(options.get("nproc_per_node", "1"))
    return nodes * per_node if nodes and per_node else None


def find_launchers(selector: JobSelector, proc_root: str = "/proc") -> list[RankProcess]:
    """torchrun's launchers (elastic agents) of the job on this node: the job before its ranks exist, at
    its rendezvous. Matched by the port of their rendezvous endpoint (--master-port, --rdzv-endpoint);
    one whose host names another master is kept too, ``master_differs``."""
    if selector.master_addr is None:
        return []
    wanted_addrs = _addresses(selector.master_addr)
    found = []
    for pid in _pids(proc_root):
        options = launcher_options(_cmdline(pid, proc_root))
        if options is None:
            continue
        host, _, port = options["endpoint"].rpartition(":")
        if _number(port) != selector.master_port:
            continue
        found.append(
            RankProcess(
                pid=pid,
                rank=None,
                local_rank=None,
                world_size=_world_of(options),
                state=process_state(pid, proc_root),
                launch=options,
                role="launcher",
                master_differs=not (_addresses(host) & wanted_addrs),
            )
        )
        if len(found) >= MAX_RANKS:
            break
    return found


def children(pid: int, proc_root: str = "/proc") -> list[int]:
    """A process's children (a launcher's: the ranks it started)."""
    out: list[int] = []
    try:
        for task in os.listdir(Path(proc_root, str(pid), "task")):
            text = Path(proc_root, str(pid), "task", task, "children").read_text()
            out += [int(c) for c in text.split() if c.isdigit()]
    except OSError:
        pass
    return out[:MAX_RANKS]
