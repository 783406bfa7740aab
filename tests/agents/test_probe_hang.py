"""A peer that stops or dies mid-collective: the survivor ends at its deadline, and the next probe passes."""

import os
import signal
import time

import pytest

from tests.support.agent_fixtures import pair

LONG_SWEEP = {"sizes": [1024, 4096, 16384, 65536, 262144, 1048576], "iterations": 200, "warmup": 0}


def peer_action_on_first_size(sig):
    """An on_event hook that sends sig to rank 1's probe process once it has measured one size."""
    pids = {}

    def on_event(rank, event):
        if event.get("event") == "started":
            pids[rank] = event["pid"]
        elif rank == 1 and event.get("event") == "size" and "sent" not in pids:
            pids["sent"] = True
            os.kill(pids[1], sig)

    return on_event, pids


@pytest.mark.timeout(90)
def test_a_stopped_peer_ends_in_timeout_at_the_deadline_and_the_next_probe_passes(redis_url):
    on_event, pids = peer_action_on_first_size(signal.SIGSTOP)
    # Stage timeouts far beyond the deadline: only the runner's wall-clock kill can end these probes.
    timeouts = {"collective": 60.0, "bandwidth": 60.0}
    began = time.monotonic()
    survivor, stopped = pair(redis_url, on_event=on_event, timeouts=timeouts, deadline_s=8.0, **LONG_SWEEP)
    assert time.monotonic() - began < 8.0 + 5.0
    assert pids.get("sent"), "the peer was never stopped: the sweep finished too fast"
    for result in (survivor, stopped):
        assert (result["status"], result["stage"], result["reason"]) == ("timeout", "bandwidth", "collective_timeout")
        assert "8.0s deadline" in result["hint"]
        assert result["extra"]["stage_log"][-1][0] == "bandwidth"
    with pytest.raises(ProcessLookupError):
        os.kill(pids[1], 0)  # the stopped process group was killed, not left behind

    for result in pair(redis_url, last_stage="collective"):
        assert result["status"] == "ok", result["hint"]


@pytest.mark.timeout(90)
def test_a_peer_killed_mid_collective_fails_the_survivor_quickly(redis_url):
    on_event, pids = peer_action_on_first_size(signal.SIGKILL)
    began = time.monotonic()
    survivor, killed = pair(redis_url, on_event=on_event, deadline_s=20.0, **LONG_SWEEP)
    assert pids.get("sent")
    assert time.monotonic() - began < 15.0
    assert survivor["stage"] == "bandwidth"
    assert (survivor["status"], survivor["reason"]) in {("failed", "transport"), ("timeout", "collective_timeout")}, (
        survivor["detail"]
    )
    assert "n0" in survivor["hint"]
    assert (killed["status"], killed["reason"]) == ("failed", "probe_crashed")
    assert "SIGKILL" in killed["hint"]
