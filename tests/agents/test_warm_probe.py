"""The warm probe process: probes forked from it behave like cold ones, and nothing hangs when it fails."""

import os
import signal
import time

import pytest

from agents import runner
from agents.warmhost import WarmHost
from tests.support import timing
from tests.support.agent_fixtures import SHORT_TIMEOUTS, pair


def parent_of(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[1])


@pytest.fixture
def warm(monkeypatch):
    monkeypatch.setenv("CLUSTER_HEALTH_WARM_PROBES", "1")
    runner.shutdown_warm_host()
    monkeypatch.setattr(runner, "_warm_failed_at", float("-inf"))
    runner.prewarm()
    end = time.monotonic() + timing.TORCH_PROCESS_START_S
    while runner.warm_host() is None:
        assert time.monotonic() < end, f"the warm probe process did not start within {timing.TORCH_PROCESS_START_S}s"
        time.sleep(timing.POLL_S)
    yield runner.warm_host()
    runner.shutdown_warm_host()


def parents_on_start(record):
    def on_event(rank, event):
        if event.get("event") == "started":
            record[rank] = parent_of(event["pid"])

    return on_event


@pytest.mark.timeout(90)
def test_it_forks_probes_from_the_warm_process_and_they_pass(warm, redis_url):
    parents = {}
    for result in pair(redis_url, on_event=parents_on_start(parents)):
        assert result["status"] == "ok", result["hint"]
        assert result["stage"] == "bandwidth" and result["busbw_gbps"] > 0
        assert result["versions"]["torch"]
    assert parents == {0: warm.proc.pid, 1: warm.proc.pid}


@pytest.mark.timeout(90)
def test_a_forked_probe_is_still_stopped_at_its_deadline(warm, redis_url):
    # Rank 1 waits for a master that never comes; only the deadline ends it.
    from agents.runner import run_probe
    from tests.support.agent_fixtures import command

    began = time.monotonic()
    result = run_probe(command(1, timeouts={"store": 60.0}, deadline_s=3.0), redis_url)
    assert time.monotonic() - began < 3.0 + 5.0
    assert (result["status"], result["stage"], result["reason"]) == ("timeout", "store", "store_timeout")
    assert "3.0s deadline" in result["hint"]
    assert warm.alive(), "stopping a probe must not stop the warm process"


@pytest.mark.timeout(90)
def test_a_dead_warm_process_fails_the_running_probe_and_the_next_one_starts(warm, redis_url):
    from agents.runner import run_probe
    from tests.support.agent_fixtures import command

    host_pid = warm.proc.pid

    def kill_host(event):
        if event.get("event") == "stage" and event.get("stage") == "store":
            os.kill(host_pid, signal.SIGKILL)

    began = time.monotonic()
    result = run_probe(command(1, timeouts={"store": 60.0}, deadline_s=30.0), redis_url, on_event=kill_host)
    assert time.monotonic() - began < 10.0, "the orphaned probe should end at once, not at its deadline"
    assert (result["status"], result["reason"]) == ("failed", "probe_crashed")
    # A new warm process is started by itself, and the next probes run from it.
    end = time.monotonic() + 60
    while runner.warm_host() is None:
        assert time.monotonic() < end, "no new warm probe process within 60s"
        time.sleep(timing.POLL_S)
    assert runner.warm_host().proc.pid != host_pid
    for r in pair(redis_url, last_stage="collective"):
        assert r["status"] == "ok", r["hint"]


@pytest.mark.timeout(200)
def test_it_starts_probes_cold_when_turned_off(monkeypatch, redis_url):
    monkeypatch.setenv("CLUSTER_HEALTH_WARM_PROBES", "0")
    runner.shutdown_warm_host()
    parents = {}
    # Cold, each rank imports torch before it joins the store: the master waits that long for its peer.
    cold = {**SHORT_TIMEOUTS, "store": timing.TORCH_PROCESS_START_S, "init": timing.TORCH_PROCESS_START_S}
    for result in pair(
        redis_url, on_event=parents_on_start(parents), last_stage="collective", timeouts=cold, deadline_s=150.0
    ):
        assert result["status"] == "ok", result["hint"]
    assert parents == {0: os.getpid(), 1: os.getpid()}
    assert runner.warm_host() is None


@pytest.mark.timeout(60)
def test_an_idle_warm_process_exits_by_itself():
    host = WarmHost(idle_s=0.5)
    host.start()
    try:
        host.proc.wait(timeout=timing.PROCESS_EXIT_S)
        assert host.proc.returncode == 0
        assert not host.alive()
    finally:
        host.close()


@pytest.mark.timeout(30)
def test_it_removes_the_working_directories_a_killed_agent_left(tmp_path):
    import subprocess

    gone = subprocess.Popen(["true"])
    gone.wait()
    orphan = tmp_path / f"{runner.TMP_PREFIX}{gone.pid}-abc"
    mine = tmp_path / f"{runner.TMP_PREFIX}{os.getpid()}-def"
    alive = tmp_path / f"{runner.TMP_PREFIX}1-ghi"
    other = tmp_path / "something-else"
    for d in (orphan, mine, alive, other):
        d.mkdir()
        (d / "stages.jsonl").write_text("{}\n")
    assert runner.remove_orphaned_dirs(str(tmp_path)) == [str(orphan)]
    assert not orphan.exists() and mine.exists() and alive.exists() and other.exists()
