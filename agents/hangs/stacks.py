"""Every thread's Python stack of a rank, read from outside with py-spy (it reads a stopped
process too), bounded; and the one place in it that says where the rank is."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

PY_SPY_TIMEOUT_S = 15.0
MAX_THREADS = 32
MAX_FRAMES = 48
# The torch.distributed calls a rank waits in: where a hang sits when the ranks disagree.
COLLECTIVES = frozenset(
    {
        "all_reduce",
        "all_gather",
        "all_gather_into_tensor",
        "all_gather_object",
        "all_to_all",
        "all_to_all_single",
        "reduce_scatter",
        "reduce_scatter_tensor",
        "broadcast",
        "broadcast_object_list",
        "reduce",
        "gather",
        "scatter",
        "barrier",
        "monitored_barrier",
        "send",
        "recv",
        "init_process_group",
        "new_group",
        "wait",
    }
)


def _frame(raw: dict[str, Any]) -> dict[str, Any]:
    return {"function": str(raw.get("name"))[:120], "file": str(raw.get("filename"))[-200:], "line": raw.get("line")}


def parse_dump(text: str) -> list[dict[str, Any]]:
    """py-spy's ``dump --json`` as [{"thread", "active", "frames": [innermost first]}], bounded."""
    threads = []
    for raw in json.loads(text)[:MAX_THREADS]:
        threads.append(
            {
                "thread": str(raw.get("thread_name") or raw.get("thread_id"))[:80],
                "active": bool(raw.get("active")),
                "frames": [_frame(f) for f in (raw.get("frames") or [])[:MAX_FRAMES]],
            }
        )
    return threads


def dump(pid: int) -> dict[str, Any]:
    """{"threads": [...]} of a rank, or {"error": why} (py-spy missing, no permission, the process gone)."""
    beside = Path(sys.executable).with_name("py-spy")  # installed into the agent's own venv
    spy = str(beside) if beside.exists() else shutil.which("py-spy")
    if spy is None:
        return {"error": "py-spy is not installed on this node (pip install py-spy)"}
    try:
        run = subprocess.run(
            # --nonblocking: read without suspending the rank (ptrace's stop raced with a stopped or
            # signalled rank: "Failed to suspend process"); a hung rank's stack does not change anyway.
            [spy, "dump", "--pid", str(pid), "--json", "--nonblocking"],
            capture_output=True,
            text=True,
            timeout=PY_SPY_TIMEOUT_S,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return {"error": f"py-spy did not answer within {PY_SPY_TIMEOUT_S:.0f} s"}
    if run.returncode != 0:
        return {"error": _reason(run.stderr)}
    try:
        return {"threads": parse_dump(run.stdout)}
    except (ValueError, TypeError, AttributeError):
        return {"error": "py-spy answered something that is not its JSON dump"}


def _reason(stderr: str) -> str:
    """py-spy's error and its first cause ("Error: ...: 0: ..."), not the Rust backtrace printed after them."""
    lines = [line.strip() for line in stderr.strip().splitlines()]
    error = next((line for line in lines if line.startswith("Error:")), None)
    if error is None:
        return (lines or ["py-spy failed"])[-1][:300]
    cause = next((line[2:].strip() for line in lines if line.startswith("0:")), None)
    return (error[len("Error:") :].strip() + (f": {cause}" if cause else ""))[:300]


def _ours(frame: dict[str, Any]) -> bool:
    """A frame of the job's own code: not torch's, not the standard library's or a site package's."""
    path = frame["file"]
    return not any(part in path for part in ("site-packages/", "dist-packages/", "/lib/python", "<frozen"))


def where(threads: list[dict[str, Any]]) -> dict[str, Any]:
    """Where a rank is: the collective its main thread waits in, if any, and the innermost frame of the
    job's own code (file, line, function): {"collective": name | None, "frame": {...} | None}."""
    main = next((t for t in threads if t["thread"] == "MainThread"), threads[0] if threads else None)
    if main is None:
        return {"collective": None, "frame": None}
    collective = next((f["function"] for f in main["frames"] if f["function"] in COLLECTIVES and not _ours(f)), None)
    own = next((f for f in main["frames"] if _ours(f)), None)
    return {"collective": collective, "frame": own}


# Where init_process_group, new_group and torchrun's agent wait, by the Python frame each shows (the
# native call below it, TCPStore's constructor, store.get or the process group's constructor, is not
# a Python frame): the init stage a rank or a launcher is at.
INIT_FRAMES = (
    ("next_rendezvous", "rendezvous"),  # torchrun's agent: static or c10d rendezvous
    ("_create_c10d_store", "store"),  # TCPStore's constructor: connect, or as the master wait for workers
    ("_store_based_barrier", "store_wait"),
    ("eager_connect_single_device", "pair_connect"),  # NCCL's eager communicator init (device_id)
    ("_new_process_group_helper", "pair_connect"),  # ProcessGroupGloo/NCCL's constructor: connectFullMesh
)


def init_stage(threads: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The init stage the main thread is at, from its stack: {"stage", "function"}, or None when it
    is past init (or the stack is unread). "store" is told apart (connect or wait) by the sockets."""
    main = next((t for t in threads if t["thread"] == "MainThread"), threads[0] if threads else None)
    if main is None:
        return None
    for frame in main["frames"]:  # innermost first: the innermost init frame says the stage
        if _ours(frame):
            continue
        for function, stage in INIT_FRAMES:
            if frame["function"] == function or frame["function"].endswith(f".{function}"):
                return {"stage": stage, "function": frame["function"]}
    return None
