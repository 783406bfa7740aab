"""The test bed's command line, as a person exploring uses it: scripts/testbed, then fault, status, clear, cleanup.

Each test brings a two-host bed up in a directory of its own (CLUSTER_HEALTH_TESTBED_DIR),
drives it from a second command, tears it down and checks that nothing is left:
no chtb-* namespace, no /etc/netns entry, no process, no state file.
"""

import json
import os
import signal
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import pytest

from devtools import testbed as tb_module
from devtools.devstack import ROOT, free_port, python_env
from tests.support import timing
from tests.support.fault_bed import namespace_bed_or_skip

pytestmark = [pytest.mark.netns, pytest.mark.e2e]

TB = [sys.executable, "-m", "devtools.testbed"]


@pytest.fixture
def tb_env(tmp_path):
    namespace_bed_or_skip()
    env = python_env(CLUSTER_HEALTH_TESTBED_DIR=str(tmp_path / "tb"))
    env.pop("DATABASE_URL", None)  # the bed's own SQLite, never the test session's database
    return env


def ours(env) -> list[int]:
    """Pids of every process the bed started: they all inherit its CLUSTER_HEALTH_TESTBED_DIR."""
    marker = f"CLUSTER_HEALTH_TESTBED_DIR={env['CLUSTER_HEALTH_TESTBED_DIR']}".encode()
    pids = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if marker in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0") and tb_module._cmdline(int(pid)):
                pids.append(int(pid))
        except OSError:
            continue
    return pids


def leftovers(env) -> dict:
    return {
        "namespaces": [n for n in tb_module.sh("ip", "netns", "list").split() if n.startswith("chtb-")],
        "etc": [p.name for p in tb_module.NETNS_ETC.glob("chtb-*")] if tb_module.NETNS_ETC.is_dir() else [],
        "processes": ours(env),
        "state": (Path(env["CLUSTER_HEALTH_TESTBED_DIR"]) / "state.json").exists(),
    }


def assert_nothing_left(env, timeout=timing.NOTHING_LEFT_S):
    deadline = time.monotonic() + timeout
    while (left := leftovers(env)) != {"namespaces": [], "etc": [], "processes": [], "state": False}:
        if time.monotonic() > deadline:
            raise AssertionError(f"left behind: {left}")
        time.sleep(timing.POLL_S)


def cli(env, *args, timeout=timing.BED_COMMAND_S) -> str:
    out = subprocess.run([*TB, *args], env=env, cwd=ROOT, capture_output=True, text=True, timeout=timeout)
    assert out.returncode == 0, f"{args}: exit {out.returncode}: {out.stdout} {out.stderr}"
    return out.stdout


def status(env) -> dict[str, list[str]]:
    return {name: h["faults"] for name, h in json.loads(cli(env, "status", "--json"))["hosts"].items()}


def bring_up(env):
    up = [str(ROOT / "scripts" / "testbed"), "--hosts", "2", "--port", str(free_port())]
    proc = subprocess.Popen(up, env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    seen = []
    for line in proc.stdout:
        seen.append(line)
        if "test bed up" in line:
            return proc
    proc.wait(timeout=timing.BED_COMMAND_S)
    raise AssertionError(f"scripts/testbed exited {proc.returncode}:\n{''.join(seen)[-4000:]}")


def torn_down_output(proc, env) -> str:
    """What scripts/testbed printed once it exited; if it does not exit in time, what still runs and its last words."""
    try:
        return proc.communicate(timeout=timing.BED_COMMAND_S)[0]
    except subprocess.TimeoutExpired:
        running = {pid: " ".join(tb_module._cmdline(pid) or [])[:200] for pid in ours(env)}
        proc.kill()
        out = proc.communicate()[0] or ""
        raise AssertionError(
            f"not torn down within {timing.BED_COMMAND_S}s; still running: {running}\n{out[-3000:]}"
        ) from None


@contextmanager
def bed_up(env):
    """A bed brought up by scripts/testbed; when the block ends it is killed if still running, then cleaned up."""
    proc = bring_up(env)
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
        subprocess.run([*TB, "cleanup"], env=env, cwd=ROOT, capture_output=True, timeout=timing.BED_CLEANUP_S)


def wait_online(env, names, timeout=timing.AGENTS_ONLINE_S):
    nodes_env = dict(
        env, DJANGO_SETTINGS_MODULE="cluster_health.settings", CLUSTER_HEALTH_VAR_DIR=env["CLUSTER_HEALTH_TESTBED_DIR"]
    )
    deadline = time.monotonic() + timeout
    while True:
        out = subprocess.run(
            [sys.executable, "manage.py", "nodes", "--json"],
            env=nodes_env,
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=timing.COMMAND_S,
        )
        online = {n["name"] for n in json.loads(out.stdout)["nodes"] if n["online"]} if out.returncode == 0 else set()
        if set(names) <= online:
            return
        assert time.monotonic() < deadline, f"agents not online: {out.stdout[-1000:]} {out.stderr[-1000:]}"
        time.sleep(timing.SLOW_POLL_S)


@pytest.mark.timeout(240)
def test_it_brings_a_bed_up_injects_and_clears_faults_and_leaves_nothing_on_ctrl_c(tb_env):
    with bed_up(tb_env) as proc:
        wait_online(tb_env, ["host1", "host2"])
        assert status(tb_env) == {"host1": [], "host2": []}
        assert "host1" in cli(tb_env, "status") and "no fault" in cli(tb_env, "status")

        cli(tb_env, "fault", "firewall", "host1", "host2")
        cli(tb_env, "fault", "dead-nic", "host2")
        cli(tb_env, "fault", "stop-agent", "host1")
        assert status(tb_env) == {
            "host1": ["drop from host2", "agent stopped"],
            "host2": ["drop from host1", "dead-nic eth1"],
        }
        ping = subprocess.run(
            ["ip", "netns", "exec", "chtb-demo-h1", "ping", "-c1", "-W1", "198.18.0.11"],
            capture_output=True,
            text=True,
            timeout=timing.PROCESS_EXIT_S,
        )
        assert ping.returncode != 0, "the firewall lets host1 reach host2"

        cli(tb_env, "clear", "firewall", "host1", "host2")
        cli(tb_env, "clear", "dead-nic", "host2")
        cli(tb_env, "clear", "stop-agent", "host1")
        assert status(tb_env) == {"host1": [], "host2": []}
        wait_online(tb_env, ["host1"])  # the restarted agent heartbeats

        proc.send_signal(signal.SIGINT)  # Ctrl-C
        out = torn_down_output(proc, tb_env)
        assert proc.returncode == 0 and "test bed torn down" in out, out[-3000:]
        assert_nothing_left(tb_env)
        assert "removed: nothing" in cli(tb_env, "cleanup")


@pytest.mark.timeout(240)
def test_cleanup_removes_what_a_killed_bed_left(tb_env):
    with bed_up(tb_env) as proc:
        cli(tb_env, "fault", "shape", "host1", "100")
        assert status(tb_env)["host1"] == ["shaped to 100Mbit"]
        proc.kill()  # SIGKILL: no teardown of its own
        proc.wait(timeout=timing.PROCESS_EXIT_S)
        left = leftovers(tb_env)
        assert left["namespaces"] and left["processes"] and left["state"], left
        out = cli(tb_env, "cleanup")
        assert "chtb-demo-h1" in out and "redis pid" in out, out
        assert_nothing_left(tb_env)
