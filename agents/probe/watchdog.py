"""The stage watchdog: a daemon thread that turns a stage's overrun into a named result.

It also ends the probe at once when nobody is left to read its result (the runner,
or the agent above it, is gone).
"""

from __future__ import annotations

import faulthandler
import os
import sys
import time

from agents import nccl_errors
from agents.probe.errors import TIMEOUT_REASONS, StageFailure
from agents.probe.hints import timeout_hint
from agents.probe.state import ProbeState


def watch(p: ProbeState) -> None:
    # The runner kills this process at the deadline; should the runner itself be gone
    # (agent killed: this process is re-parented), the probe ends at once.
    orphan_deadline = p.spec["spawned_at"] + p.cmd["deadline_s"] + 5.0
    parent, runner = os.getppid(), p.spec.get("runner_pid")
    while True:
        time.sleep(0.05)
        if time.time() > orphan_deadline or os.getppid() != parent or (runner and not pid_alive(runner)):
            os._exit(4)  # nobody is left to read a result
        limit = p.overrun_limit()
        if limit is None:
            continue
        failure = StageFailure(
            TIMEOUT_REASONS[p.stage],
            timeout_hint(p, p.stage, limit)
            + nccl_errors.multi_group_hang_note(p.cmd["backend"], p.cmd["multi_group"], p.stage),
            detail=f"stage {p.stage} did not finish within its {limit:.1f}s timeout",
            status="timeout",
        )
        p.evidence["stack"] = "stderr_tail"  # the faulthandler dump below, in the result's stderr tail
        if p.finish_failure(failure):
            faulthandler.dump_traceback(file=sys.stderr, all_threads=True)
            sys.stderr.flush()
            os._exit(3)
        return


def pid_alive(pid: int) -> bool:
    """Whether a process with this pid exists (ours or not)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True
    return True
