"""Which process group a rank waits on, named by the job's own variables: read from the rank's frames'
locals (py-spy ``dump --locals``), on the node, and only names leave it.

A collective's frame (``all_reduce`` in torch.distributed) holds the group object it runs on as its
local ``group``; py-spy shows an object by its type and address (``<...ProcessGroup at 0x7f..>``),
which means nothing in another process, but the job's own frames hold the same object under the names
the job gave it (``data``, ``experts``): the names bound to the object the rank waits on, and the names
bound to the other groups it holds. Two ranks that wait in the same collective on groups the job calls
by different names (one waits on ``data`` while the other holds ``data`` but waits on ``experts``) are
in different collectives: DeepSpeed's multi-group hang, named without the Flight Recorder.

No value of any local leaves the node: only identifiers of the job's own frames whose value is a process
group (or ``None`` for the default group), at most MAX_NAMES of each, each at most 64 characters.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from agents.hangs import stacks

MAX_NAMES = 16
_GROUP = re.compile(r"^<torch\._C\._distributed_c10d\.ProcessGroup at (0x[0-9a-f]{1,16})>$")
DEFAULT = "the default group"


def _name(value: Any) -> str | None:
    text = str(value)
    return text if text.isidentifier() and len(text) <= 64 else None


def waits_on(dump: Any) -> dict[str, Any] | None:
    """From py-spy's ``dump --locals --json``: {"waits_on": [names], "other_groups": [names]} of the main
    thread's collective, or None when it waits in none or the group is not shown."""
    if not isinstance(dump, list):
        return None
    main = next((t for t in dump if isinstance(t, dict) and t.get("thread_name") == "MainThread"), None)
    frames = [f for f in (main or {}).get("frames") or [] if isinstance(f, dict)]
    for i, frame in enumerate(frames):
        if frame.get("name") in stacks.COLLECTIVES and not stacks._ours(stacks._frame(frame)):
            locals_ = {v.get("name"): str(v.get("repr")) for v in frame.get("locals") or [] if isinstance(v, dict)}
            if "group" not in locals_:
                return None
            waited = _GROUP.match(locals_["group"])
            if waited is None and locals_["group"] != "None":
                return None
            return _names(frames[i + 1 :], waited.group(1) if waited else None)
    return None


def _names(callers: list[dict[str, Any]], address: str | None) -> dict[str, Any]:
    mine: set[str] = set()
    others: set[str] = set()
    for frame in callers:
        if not stacks._ours(stacks._frame(frame)):
            continue
        for v in frame.get("locals") or []:
            name = _name(v.get("name")) if isinstance(v, dict) else None
            found = _GROUP.match(str(v.get("repr"))) if name else None
            if name and found:
                (mine if found.group(1) == address else others).add(name)
    return {
        "waits_on": sorted(mine)[:MAX_NAMES] if address else [DEFAULT],
        "other_groups": sorted(others - mine)[:MAX_NAMES],
    }


def read(pid: int) -> dict[str, Any] | None:
    """``waits_on`` of a live rank (one more py-spy dump, with locals), None when it says nothing."""
    beside = Path(sys.executable).with_name("py-spy")  # the agent's own venv, as stacks.dump finds it
    spy = str(beside) if beside.exists() else shutil.which("py-spy")
    if spy is None:
        return None
    try:
        run = subprocess.run(
            [spy, "dump", "--pid", str(pid), "--json", "--nonblocking", "--locals"],
            capture_output=True,
            text=True,
            timeout=stacks.PY_SPY_TIMEOUT_S,
            check=False,
        )
        return waits_on(json.loads(run.stdout)) if run.returncode == 0 else None
    except (subprocess.TimeoutExpired, ValueError):
        return None
