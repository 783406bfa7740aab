"""A probe's result is written once, and is on disk before the thread that lost the race to write it goes on.

The main thread and the stage watchdog both end a probe that failed right at its stage limit
(a refused connect retried until its timeout, on a loaded machine). The one that loses goes
on to end the process with os._exit: had it returned before the winner's write was done, the
probe would exit 0 with no result, and its half would read probe_crashed.
"""

from __future__ import annotations

import json
import threading
import time

from agents.probe import StagedChild, StageLog


class SlowToWrite(StagedChild):
    """A child whose result takes a while to put together (evidence read from the kernel, a busy host)."""

    def result_fields(self, status: str) -> dict:
        time.sleep(0.3)
        return {"stage_times": dict(self.stage_times)}


def test_the_thread_that_loses_the_race_returns_only_once_the_result_is_written(tmp_path):
    spec = {
        "command": {"node": "n0"},
        "result_path": str(tmp_path / "result.json"),
        "events_path": str(tmp_path / "events.jsonl"),
    }
    child = SlowToWrite(spec, StageLog(spec["events_path"]), "connect")
    winner = threading.Thread(target=child.finish, args=("timeout", "connect_timeout", "the watchdog's"))
    winner.start()
    time.sleep(0.05)  # the watchdog is writing its result
    assert child.finish("failed", "refused", "the main thread's") is False
    # What the main thread does next is os._exit: the result must already be there.
    result = json.loads((tmp_path / "result.json").read_text())
    assert (result["status"], result["reason"]) == ("timeout", "connect_timeout")
    winner.join(5)
