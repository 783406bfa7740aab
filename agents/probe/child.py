"""What a probe rank and the gpu check share: the stage log, the stage clock and a result written once.

`run_child(argv, make)` is the entry point of either child process: it reads the spec,
starts the subclass's watchdog thread, runs its ladder and ends the process.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from agents.probe.errors import first_line

# The watchdog is a backstop: the stage's own timeouts (which know more) get this long to fire first.
WATCHDOG_GRACE_S = 0.75


class StageLog:
    """Append-only JSON lines, flushed per event: readable after a SIGKILL."""

    def __init__(self, path: str):
        self.file = open(path, "a", buffering=1)

    def emit(self, **event: Any) -> None:
        event["t"] = time.time()
        self.file.write(json.dumps(event) + "\n")
        self.file.flush()


class StagedChild:
    """What a probe rank and the gpu check share: the stage clock the watchdog reads, and a result written once.

    A subclass implements run() (the ladder), watchdog() (a daemon thread holding each stage
    to its limit) and fail() (the result for whatever ended run()); run_child() drives them.
    """

    def __init__(self, spec: dict[str, Any], log: StageLog, stage: str):
        self.spec, self.cmd, self.log = spec, spec["command"], log
        self.name = self.cmd["node"]
        self.stage = stage
        self.stage_started = time.monotonic()
        self.stage_limit: float | None = None
        self.stage_times: dict[str, float] = {}
        self.versions: dict[str, Any] = {}
        self.lock = threading.Lock()
        self.finished = False
        self.torch: Any = None  # the torch module, imported in run() (never at module level)

    def close_stage(self) -> float:
        """Add the time spent in the current stage to stage_times; returns the monotonic now."""
        now = time.monotonic()
        self.stage_times[self.stage] = round(self.stage_times.get(self.stage, 0.0) + now - self.stage_started, 4)
        return now

    def overrun_limit(self) -> float | None:
        """The current stage's limit once the stage has run past it (and the grace), else None."""
        limit = self.stage_limit
        if limit is None or time.monotonic() - self.stage_started <= limit + WATCHDOG_GRACE_S:
            return None
        return limit

    def finish(
        self, status: str, reason: str | None = None, hint: str | None = None, detail: str | None = None
    ) -> bool:
        """Write the result once: False when it was already written (the watchdog and the main thread may race here).

        The result is on disk before either returns: the one that lost waits under the lock
        while the other writes, since it goes on to end the process (os._exit), and a process
        ended mid-write would leave no result at all.
        """
        with self.lock:
            if self.finished:
                return False
            self.finished = True
            self.stage_limit = None
            self.close_stage()
            result = {
                "status": status,
                "stage": self.stage,
                "reason": reason,
                "hint": hint,
                "detail": detail,
                **self.result_fields(status),
            }
            # Replaced in one step: the runner may read it at any time.
            tmp = self.spec["result_path"] + ".tmp"
            with open(tmp, "w") as f:
                json.dump(result, f)
            os.replace(tmp, self.spec["result_path"])
        self.log.emit(event="finished", status=status, stage=self.stage, reason=reason)
        return True

    def result_fields(self, status: str) -> dict[str, Any]:
        """What the result carries besides its status, stage, reason, hint and detail."""
        raise NotImplementedError

    def finish_crashed(self, reason: str, what: str, e: BaseException) -> None:
        """Finish with an exception no stage named: where it happened and its first line."""
        self.finish(
            "failed",
            reason,
            f"{what} on {self.name} failed in stage {self.stage}: {first_line(e)}",
            detail=first_line(e),
        )

    def run(self) -> None:
        raise NotImplementedError

    def watchdog(self) -> None:
        raise NotImplementedError

    def fail(self, e: BaseException) -> None:
        """Write the result for an exception that ended run()."""
        raise NotImplementedError

    def linger(self) -> None:
        """Wait, after the result, for whatever peers still need from this process; none by default."""


def run_child(argv: list[str] | None, make: Callable[[dict[str, Any], StageLog], StagedChild]) -> None:
    """The child's entry point: `python -m MODULE SPEC.json` runs make(spec, log) and never returns."""
    argv = sys.argv[1:] if argv is None else argv
    with open(argv[0]) as f:
        spec = json.load(f)
    log = StageLog(spec["events_path"])
    log.emit(event="started", pid=os.getpid())
    child = make(spec, log)
    threading.Thread(target=child.watchdog, daemon=True, name="stage-watchdog").start()
    try:
        child.run()
    except BaseException as e:  # the result must say what went wrong, whatever it was
        child.fail(e)
    child.linger()
    sys.stdout.flush()
    sys.stderr.flush()
    # Skip interpreter teardown: destroying a process group whose peer is gone can block.
    os._exit(0)
