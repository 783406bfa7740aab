"""Sweeps that Slurm decides the nodes of, through a real slurmctld with a slurmd per node (on loopback):
the gang check a PrologSlurmctld runs before a job, and idle-gap sweeps held by a MAINT reservation.

The agents' side is played in-process (devtools/sweep_driver.py); the sweep, its confirmation
pass, its findings and the exit code are the server's own code and the real management command.
"""

from __future__ import annotations

import math
import re
import time
from datetime import datetime, timedelta

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone

from cluster_health import sweeps, vocabulary
from cluster_health.actions import slurm, tasks
from cluster_health.core import planner
from cluster_health.models import PairCoverage, PairProbe, Sweep
from cluster_health.queues import dispatch
from cluster_health.sweeps import idle, lifecycle, waiting
from devtools.sweep_driver import heartbeat, result_for
from tests.support.action_fixtures import SlurmCluster

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("memory_channel_layer")]
NODES = ["n1", "n2", "n3", "n4"]


@pytest.fixture
def slurm_bed(tmp_path, monkeypatch, settings):
    cluster = SlurmCluster(tmp_path / "slurm", NODES, own_ports=True).start()
    monkeypatch.setenv("SLURM_CONF", str(cluster.conf))
    settings.SLURM_NODE_MAP = ""
    try:
        for n in NODES:
            cluster.start_slurmd(n)
            heartbeat(n)
        yield cluster
    finally:
        cluster.stop()


def running_job(cluster, *args: str) -> str:
    job = cluster.run("sbatch", "--parsable", "--output=/dev/null", *args, "--wrap", "sleep 120").strip()
    deadline = time.monotonic() + 20
    while "JobState=RUNNING" not in cluster.run("scontrol", "show", "job", "--oneliner", job):
        assert time.monotonic() < deadline, cluster.run("scontrol", "show", "job", job)
        time.sleep(0.2)
    return job


def nodes_of(cmd) -> set[str]:
    probe = PairProbe.objects.select_related("node_a", "node_b").get(pk=cmd["probe_id"])
    return {probe.node_a.name, probe.node_b.name}


def n3_dead(cmd):
    if "n3" in nodes_of(cmd):
        return result_for(cmd, status="timeout", stage="connect", reason="connect_timeout", hint="no answer")
    return result_for(cmd)


def drive_with(driver, monkeypatch, reply=None):
    """The gang check's wait: the agents answer at once (as ``reply`` says)."""

    def wait_for(sweep, timeout, *args, **kwargs):
        driver.run(sweeps.start_sweep, sweep.pk)
        driver.answer_all(reply)
        sweep.refresh_from_db()
        return not sweep.is_open

    monkeypatch.setattr(waiting, "wait_for", wait_for)


def gang_check(job: str, timeout: float = 30) -> int:
    with pytest.raises(SystemExit) as ended:
        call_command("sweep", slurm_job=job, timeout=timeout)
    return ended.value.code


def test_the_gang_check_fails_a_job_on_a_confirmed_fault_and_passes_a_healthy_one(
    slurm_bed, driver, monkeypatch, capsys, settings
):
    settings.CONFIRM_AFTER_S = 120  # the fleet's sweeps wait before the second look; the prolog's does not
    job = running_job(slurm_bed, "-N", "4")
    drive_with(driver, monkeypatch, n3_dead)
    assert gang_check(job) == 2
    out = capsys.readouterr().out
    assert "node_unreachable n3" in out, out
    sweep = Sweep.objects.get()
    assert (sweep.kind, sweep.nodes, sweep.params["slurm_job"]) == ("quick", NODES, job)
    assert sweep.params["confirm_after_s"] == 0 and "confirm_at" not in sweep.params

    drive_with(driver, monkeypatch)
    assert gang_check(job) == 0
    assert "passed 4 nodes" in capsys.readouterr().out


def test_the_gang_check_lets_a_job_start_when_the_server_does_not_answer_or_slurmctld_is_gone(slurm_bed, capsys):
    job = running_job(slurm_bed, "-N", "2", "-w", "n1,n2")
    began = time.monotonic()
    assert gang_check(job, timeout=3) == 0  # no worker starts the sweep: the server is paused
    assert time.monotonic() - began < 5
    assert "did not end within 3s; the job starts unchecked" in capsys.readouterr().err
    assert Sweep.objects.get().status == "cancelled"  # it never runs later, over the job
    slurm_bed.stop()
    assert gang_check(job, timeout=3) == 0
    assert "the job starts unchecked" in capsys.readouterr().err


def test_an_idle_sweep_holds_only_idle_nodes_measures_the_stalest_pairs_and_releases_them(slurm_bed, driver):
    running_job(slurm_bed, "-N", "1", "-w", "n1")
    PairCoverage.objects.create(node_a="n2", node_b="n3", last_measured="2026-01-01T00:00:00Z", status="ok")
    sweep = driver.run(idle.start, 2)
    hold = sweep.params["idle_hold"]
    # n2-n3 was measured; n2-n4 and n3-n4 never were: the stalest pair is one of those.
    assert set(sweep.params["pairs"][0]) in ({"n2", "n4"}, {"n3", "n4"}), sweep.params
    assert hold["reservation"] in slurm_bed.run("scontrol", "show", "reservation", "--oneliner")
    driver.run(sweeps.start_sweep, sweep.pk)
    probed = set()

    def reply(cmd):
        probed.update(nodes_of(cmd))
        return result_for(cmd)

    driver.answer_all(reply)
    sweep.refresh_from_db()
    assert sweep.status == "finished" and "n1" not in probed  # n1 runs a job
    tasks.after_sweep(sweep.pk)
    assert hold["reservation"] not in slurm_bed.run("scontrol", "show", "reservation", "--oneliner")
    measured = set(PairCoverage.objects.values_list("node_a", "node_b"))
    assert {tuple(sorted(p)) for p in sweep.params["pairs"]} <= measured


def test_an_idle_sweep_refuses_when_a_job_took_the_nodes(slurm_bed):
    running_job(slurm_bed, "-N", "3", "-w", "n1,n2,n3")
    with pytest.raises(idle.IdleSweepError, match="idle in Slurm"):
        idle.start()
    with pytest.raises(CommandError, match=r"idle sweep: 1 node\(s\) idle in Slurm"):
        call_command("sweep", idle=True, rounds=3)
    for rounds in (0, idle.MAX_NODES):
        with pytest.raises(CommandError, match="--rounds: expected 1..1023"):
            call_command("sweep", idle=True, rounds=rounds)
    assert not Sweep.objects.exists()


def test_a_killed_worker_leaves_the_nodes_held_no_longer_than_the_reservations_duration(slurm_bed, driver, settings):
    """The after-sweep step that releases a hold never runs when the server worker dies mid-sweep for good: the
    reservation ends by itself at its Duration, which slurmctld fixed when the hold was made (docs/OPERATIONS.md)."""
    settings.CONFIRM_AFTER_S = 90  # the confirmation pass's wait is held for too
    sweep = driver.run(idle.start, 4, max_rounds=2)  # 6 pairs never measured, 2 rounds: 4 of them, 2 a round
    hold = sweep.params["idle_hold"]
    assert len(planner.schedule_pairs([tuple(p) for p in sweep.params["pairs"]], NODES)) == 2
    assert len(sweep.params["pairs"]) == 4
    driver.run(sweeps.start_sweep, sweep.pk)  # the sweep runs; nobody will finish it or run its after-sweep step
    line = slurm_bed.run("scontrol", "show", "reservation", hold["reservation"], "--oneliner")
    start, end = (
        datetime.fromisoformat(re.search(rf"\b{key}=(\S+)", line).group(1)) for key in ("StartTime", "EndTime")
    )
    assert end - start == timedelta(minutes=hold["minutes"]) and "MAINT" in line, line
    # The estimate behind it: every round's probe deadline twice (a confirmation pass), its wait and the margin.
    rounds = len(planner.schedule_pairs([tuple(p) for p in sweep.params["pairs"]], hold["slurm_nodes"]))
    deadline = dispatch.probe_settings({}, "bandwidth", kind="pair")["deadline_s"]
    assert hold["minutes"] == math.ceil((2 * rounds * deadline + 90 + idle.HOLD_MARGIN_S) / 60)
    assert sorted(hold["slurm_nodes"]) == NODES
    # Released early by whoever ends the sweep (here: the command's own end); once gone, releasing is a no-op.
    assert idle.release_hold(sweep) == [f"released {hold['reservation']}"]
    assert hold["reservation"] not in slurm_bed.run("scontrol", "show", "reservation", "--oneliner")
    assert idle.release_hold(sweep) == []


@pytest.mark.parametrize("ending", ["cancelled", "failed"])
def test_an_idle_sweep_that_ends_unfinished_gives_its_hold_back_at_once(slurm_bed, driver, ending):
    sweep = driver.run(idle.start, 2)
    hold = sweep.params["idle_hold"]
    driver.run(sweeps.start_sweep, sweep.pk)
    if ending == "cancelled":
        assert driver.run(lifecycle.cancel, sweep.pk)
    else:
        driver.run(lifecycle._fail, Sweep.objects.get(pk=sweep.pk), "planning broke")
    sent = [kw["sweep_id"] for task, kw in driver.server_tasks if task == vocabulary.TASK_AFTER_SWEEP]
    assert sent == [sweep.pk], driver.server_tasks  # sent through the outbox, as a finished sweep's actions
    assert hold["reservation"] in slurm_bed.run("scontrol", "show", "reservation", "--oneliner")
    tasks.after_sweep(sweep.pk)
    assert hold["reservation"] not in slurm_bed.run("scontrol", "show", "reservation", "--oneliner")
    assert Sweep.objects.get(pk=sweep.pk).status == ending


def node_state(cluster, node: str) -> str:
    line = cluster.run("scontrol", "show", "node", "--oneliner", node)
    return re.search(r"\bState=(\S+)", line).group(1)


def test_a_busy_node_with_stale_pairs_is_caught_and_swept_by_the_next_idle_sweep_once_idle(slurm_bed, driver, settings):
    """A catch: a MAINT,IGNORE_JOBS reservation on a node that runs a job. The job goes on untouched and the
    node is never probed or held for a sweep while it runs; once it runs nothing, no other job starts there
    and the next idle sweep takes it with its stale pairs, ending the catch. (This bed's slurmd leaves an
    ended job COMPLETING for good, so the job's end is played by a catch made on an idle node.)"""
    settings.IDLE_CATCH_SHARE = 0.25  # one node of four
    job = running_job(slurm_bed, "-N", "1", "-w", "n1")
    for a, b in (("n2", "n3"), ("n2", "n4"), ("n3", "n4")):
        PairCoverage.objects.create(node_a=a, node_b=b, last_measured=timezone.now(), status="ok")
    first = driver.run(idle.start, 2)
    assert all("n1" not in p for p in first.params["pairs"])
    [(catch, node)] = slurm.catches().items()
    line = slurm_bed.run("scontrol", "show", "reservation", catch, "--oneliner")
    assert node == "n1" and "IGNORE_JOBS" in line and "MAINT" in line, line
    assert f"Duration=00:{idle.catch_minutes(2):02d}:00" in line, line
    assert "JobState=RUNNING" in slurm_bed.run("scontrol", "show", "job", "--oneliner", job)
    # The catch is full (one node of four), the first sweep's nodes are in its hold and n1 still runs its job:
    # one node left, nothing to sweep; and a hold over n1 is refused while the job runs, catch or not.
    with pytest.raises(idle.IdleSweepError, match="1 node"):
        idle.start(2)
    with pytest.raises(slurm.SlurmError, match="busy"):
        slurm.hold(f"{slurm.HOLD_PREFIX}probe", ["n1"], 5, "root")
    assert [r for r in slurm.reservations() if r.startswith(slurm.CATCH_PREFIX)] == [catch]

    idle.release_hold(first)
    slurm.release(catch)
    slurm_bed.run("scancel", job)
    # n2 caught as n1 was, its job over: in the catch and running nothing, jobs wait for it and sweeps take it.
    caught = f"{slurm.CATCH_PREFIX}played"
    slurm.hold(caught, ["n2"], 30, "root", catch=True)
    waiting_job = slurm_bed.run(
        "sbatch", "--parsable", "--output=/dev/null", "-N", "1", "-w", "n2", "--wrap", "sleep 120"
    ).strip()
    time.sleep(2)
    assert "JobState=PENDING" in slurm_bed.run("scontrol", "show", "job", "--oneliner", waiting_job)
    PairCoverage.objects.filter(node_a="n2").delete()  # n2's pairs are the stalest now
    second = driver.run(idle.start, 2)
    assert "n2" in second.params["idle_hold"]["slurm_nodes"], second.params
    assert caught not in slurm_bed.run("scontrol", "show", "reservation", "--oneliner")  # the sweep's hold has n2
    assert "JobState=PENDING" in slurm_bed.run("scontrol", "show", "job", "--oneliner", waiting_job)
    idle.release_hold(second)
