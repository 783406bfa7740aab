"""End to end: real Redis, real server worker and beat, real agents probing on loopback.

Sweeps are requested the way a CI job does, with ``manage.py sweep --wait --json``
in a subprocess pointed at the test database. Small sizes and short stage
timeouts keep these fast on two cores.
"""

import json
import os
import signal
import socket
import time

import pytest

from tests.support.sweep_setup import FAST, TimedSweep, manage, running_agents

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


def test_it_runs_a_4_node_full_sweep_with_every_pair_ok(stack):
    names = ["e0", "e1", "e2", "e3"]
    running_agents(stack, names)
    started = time.monotonic()
    run = manage(stack, "sweep", "--kind", "full", "--nodes", ",".join(names), "--wait", "--json", *FAST)
    elapsed = time.monotonic() - started
    assert run.returncode == 0, run.stdout + run.stderr
    report = json.loads(run.stdout)
    print(f"4-node full sweep: {elapsed:.1f}s wall, {report['rounds']} rounds, sweep {report['duration_s']}s")
    assert set(report) >= {"sweep", "status", "verdict", "kind", "backend", "nodes", "pairs", "findings"}
    assert (report["status"], report["verdict"], report["kind"]) == ("finished", "pass", "full")
    assert report["rounds"] == 4  # 3 pair rounds + the group all_reduce
    assert len(report["pairs"]) == 6
    for p in report["pairs"]:
        assert set(p) >= {"a", "b", "status", "stage", "reason", "latency_us", "algbw_gbps", "busbw_gbps", "hint"}
        assert (p["status"], p["stage"], p["reason"]) == ("ok", "bandwidth", None)
        assert p["busbw_gbps"] > 0 and p["latency_us"] > 0
    assert report["groups"][0]["status"] == "ok"


def test_it_runs_a_sampled_sweep_of_real_probes_and_the_same_pairs_from_its_seed(stack):
    names = ["e0", "e1", "e2", "e3"]
    running_agents(stack, names)
    # Plans and seeds, not speeds: no rolling baseline (earlier sweeps of e0..e3 on this busy machine made one).
    flags = (
        "--kind",
        "sampled",
        "--rounds",
        "2",
        "--nodes",
        ",".join(names),
        "--baseline",
        "none",
        "--wait",
        "--json",
        *FAST,
    )
    run = manage(stack, "sweep", *flags)
    assert run.returncode == 0, run.stdout + run.stderr
    report = json.loads(run.stdout)
    assert (report["kind"], report["verdict"], report["rounds"]) == ("sampled", "pass", 2)
    assert len(report["pairs"]) == 4 and {(p["status"], p["stage"]) for p in report["pairs"]} == {("ok", "bandwidth")}
    for k in (1, 2):  # every node in each round
        assert sorted(n for p in report["pairs"] if p["round"] == k for n in (p["a"], p["b"])) == names
    again = manage(stack, "sweep", *flags, "--seed", str(report["plan"]["seed"]))
    assert again.returncode == 0, again.stdout + again.stderr
    pairs = sorted(sorted((p["a"], p["b"])) for p in report["pairs"])
    assert sorted(sorted((p["a"], p["b"])) for p in json.loads(again.stdout)["pairs"]) == pairs


def test_it_gives_byes_to_5_nodes(stack):
    names = ["e0", "e1", "e2", "e3", "e4"]
    running_agents(stack, names)
    run = manage(stack, "sweep", "--kind", "connectivity", "--nodes", ",".join(names), "--wait", "--json", *FAST)
    report = json.loads(run.stdout)
    assert run.returncode == 0, run.stdout + run.stderr
    assert report["rounds"] == 5 and len(report["pairs"]) == 10
    assert {p["status"] for p in report["pairs"]} == {"ok"}


def test_it_blames_an_agent_stopped_mid_sweep(stack):
    names = ["e0", "e1", "e2", "e3"]
    running_agents(stack, names)
    # e3 is frozen (agent and warm probe process) while still online, so the sweep is planned with it
    # and its first round cannot close; it is killed once another pair has passed: mid-sweep, whatever
    # the speed of the probes.
    os.killpg(stack.sup.procs["agent-e3"].pid, signal.SIGSTOP)
    sweep = TimedSweep(stack, "--kind", "connectivity", "--nodes", ",".join(names), "--wait", *FAST)
    from cluster_health.models import PairProbe

    deadline = time.monotonic() + 60
    while not PairProbe.objects.filter(status="ok").exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert PairProbe.objects.filter(status="ok").exists(), "no pair passed while e3 was frozen"
    stack.stop_agent("e3", sig=9)
    rc, report = sweep.report(timeout=180)
    assert rc == 2, report
    assert report["status"] == "finished" and report["verdict"] == "fail"
    e3_pairs = [p for p in report["pairs"] if "e3" in (p["a"], p["b"]) and p["status"] != "ok"]
    assert e3_pairs and {p["status"] for p in e3_pairs} <= {"offline", "timeout"}
    assert any(p["status"] == "offline" for p in e3_pairs)
    assert [f["subject"] for f in report["findings"] if f["severity"] == "fail"] == ["e3"]
    others = [p for p in report["pairs"] if "e3" not in (p["a"], p["b"])]
    assert {p["status"] for p in others} == {"ok"}


def test_it_catches_a_taken_master_port_in_the_launch_rehearsal(stack):
    names = ["e0", "e1"]
    running_agents(stack, names)
    squatter = socket.socket()
    squatter.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    squatter.bind(("127.0.0.1", 0))
    squatter.listen(1)
    port = squatter.getsockname()[1]
    try:
        run = manage(
            stack, "preflight", "--master", "e0", "--port", str(port), "--nodes", "e0,e1", "--json", "--timeout", "120"
        )
    finally:
        squatter.close()
    assert run.returncode == 2, run.stdout + run.stderr
    report = json.loads(run.stdout)
    assert any("port_in_use" in (f["code"], f["text"]) or "port_in_use" in f["text"] for f in report["findings"]), (
        report["findings"]
    )
