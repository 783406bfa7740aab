"""Slurm: blamed nodes drained with the sweep in the reason, resumed once they pass; others' drains untouched.

Only confirmed evidence drains: a failure the sweep's confirmation pass saw again. Runs
against a real slurmctld (and munged) that the fixture starts with a private slurm.conf;
state is read back with sinfo and scontrol.
"""

import pytest

from cluster_health.actions import slurm
from cluster_health.actions.models import SlurmDrain
from tests.support.action_fixtures import SlurmCluster
from tests.support.action_rows import finished_sweep

NODES = ["gpu-a", "gpu-b", "gpu-c"]
MAP = "s/^gpu-/node-/"
C_DEAD = ("fail", "node_unreachable", "gpu-c", "every pair with gpu-c failed (2 of 2: connect_timeout)")
C_OFFLINE = ("fail", "node_offline", "gpu-c", "gpu-c went offline: its agent stopped sending heartbeats")
BAD_C = {("gpu-a", "gpu-c"): "timeout", ("gpu-b", "gpu-c"): "timeout"}
SEEN_AGAIN_C = {("gpu-a", "gpu-c"): "confirmed", ("gpu-b", "gpu-c"): "confirmed"}


def dead_c():
    """A sweep in which every pair of gpu-c timed out, and again when the confirmation pass probed them."""
    return finished_sweep(NODES, BAD_C, [C_DEAD], outcomes=SEEN_AGAIN_C)


@pytest.fixture
def slurmctld(tmp_path, monkeypatch, settings):
    cluster = SlurmCluster(tmp_path / "slurm", ["node-a", "node-b", "node-c"]).start()
    monkeypatch.setenv("SLURM_CONF", str(cluster.conf))
    settings.SLURM_NODE_MAP = MAP
    try:
        yield cluster
    finally:
        cluster.stop()


def test_it_maps_names_by_substitution_or_by_list():
    assert slurm.slurm_name("gpu-17", "s/^gpu-/node/") == "node17"
    assert slurm.slurm_name("gpu-17", "s|^gpu-(\\d+)$|n\\1.rack2|") == "n17.rack2"
    assert slurm.slurm_name("a1", "a1=sl-a1, b2=sl-b2") == "sl-a1"
    assert slurm.slurm_name("c3", "a1=sl-a1") == "c3"
    assert slurm.slurm_name("c3", "") == "c3"


def test_it_refuses_a_mapping_that_would_not_be_a_plain_node_name():
    with pytest.raises(slurm.NodeMapError):
        slurm.slurm_name("gpu-1", "s/^gpu-/x State=DOWN /")
    with pytest.raises(slurm.NodeMapError):
        slurm.parse_node_map("s/(/x/")
    with pytest.raises(slurm.NodeMapError):
        slurm.parse_node_map("a1")


@pytest.mark.django_db
def test_it_drains_a_blamed_node_and_resumes_it_when_a_sweep_passes_it(slurmctld):
    bad = dead_c()
    assert slurm.act_on_sweep(bad, "drain") == ["drained node-c"]
    state, reason = slurmctld.sinfo_states()["node-c"]
    assert state.startswith("drain") and reason.startswith(
        f"cluster-health sweep #{bad.pk}: every pair with gpu-c failed"
    )
    assert slurmctld.sinfo_states()["node-a"][0] == "unknown"
    again = dead_c()
    assert slurm.act_on_sweep(again, "drain") == []  # already ours: no second drain, reason unchanged
    assert slurmctld.sinfo_states()["node-c"][1].startswith(f"cluster-health sweep #{bad.pk}:")
    good = finished_sweep(NODES)
    assert slurm.act_on_sweep(good, "drain") == ["resumed node-c"]
    state, reason = slurmctld.sinfo_states()["node-c"]
    assert not state.startswith("drain") and reason == "none"
    drain = SlurmDrain.objects.get()
    assert (drain.status, drain.sweep_id, drain.resumed_by_id) == ("resumed", bad.pk, good.pk)


@pytest.mark.django_db
def test_it_never_touches_a_node_someone_else_drained(slurmctld):
    slurmctld.run("scontrol", "update", "NodeName=node-c", "State=DRAIN", "Reason=RMA ticket 4411")
    bad = dead_c()
    assert slurm.act_on_sweep(bad, "drain") == ["left node-c: drained by someone else"]
    assert slurm.act_on_sweep(finished_sweep(NODES), "drain") == []
    state, reason = slurmctld.sinfo_states()["node-c"]
    assert state.startswith("drain") and reason == "RMA ticket 4411"
    assert not SlurmDrain.objects.exists()


@pytest.mark.django_db
def test_it_lets_go_of_a_node_an_operator_redrained_with_their_own_reason(slurmctld):
    bad = dead_c()
    slurm.act_on_sweep(bad, "drain")
    slurmctld.run("scontrol", "update", "NodeName=node-c", "State=DRAIN", "Reason=swapping the NIC")
    assert slurm.act_on_sweep(finished_sweep(NODES), "drain") == ["released node-c: changed outside cluster-health"]
    assert slurmctld.sinfo_states()["node-c"] == ("drained", "swapping the NIC")
    assert SlurmDrain.objects.get().status == "released"


@pytest.mark.django_db
def test_report_mode_only_says_what_it_would_do(slurmctld, caplog):
    bad = dead_c()
    assert slurm.act_on_sweep(bad, "report") == ["would drain node-c"]
    assert "would drain node-c" in caplog.text
    assert slurmctld.sinfo_states()["node-c"] == ("unknown", "none")
    assert slurm.act_on_sweep(bad, "off") == []


@pytest.mark.django_db
def test_a_replayed_or_late_task_for_an_old_sweep_never_drains_a_node_a_newer_sweep_passed(slurmctld, settings):
    """``cluster_health.actions.slurm(sweep_id=<old>)`` queued again (a replay on queue server, or a
    retry that ran late) speaks for a sweep that is no longer the node's newest: nothing is drained."""
    from cluster_health.actions import tasks

    settings.SLURM_ACTIONS = "drain"
    old = dead_c()
    newer = finished_sweep(NODES)
    assert tasks.slurm_actions(newer.pk) == []
    assert tasks.slurm_actions(old.pk) == [f"left node-c: sweep #{old.pk} is not this node's newest"]
    assert not slurmctld.sinfo_states()["node-c"][0].startswith("drain")
    assert not SlurmDrain.objects.exists()
    newest = dead_c()  # the node failing again now is acted on
    assert tasks.slurm_actions(newest.pk) == ["drained node-c"]


@pytest.mark.django_db
def test_a_late_resume_task_for_an_older_passing_sweep_never_resumes_a_node_a_newer_sweep_blamed(slurmctld, settings):
    """A drained node passes sweep 2, fails again in sweep 3 (still drained: no second drain), then sweep 2's
    task runs late: it speaks for a sweep that is no longer the node's newest, so the node stays drained."""
    from cluster_health.actions import tasks

    settings.SLURM_ACTIONS = "drain"
    first = dead_c()
    assert tasks.slurm_actions(first.pk) == ["drained node-c"]
    passing = finished_sweep(NODES)
    blamed_again = dead_c()
    assert tasks.slurm_actions(blamed_again.pk) == []  # drained already, by the first
    assert tasks.slurm_actions(passing.pk) == [f"left node-c: sweep #{passing.pk} is not this node's newest"]
    assert slurmctld.sinfo_states()["node-c"][0].startswith("drain")
    assert SlurmDrain.objects.get().status == "drained"
    cleared = finished_sweep(NODES)  # the node passing now is resumed
    assert tasks.slurm_actions(cleared.pk) == ["resumed node-c"]


@pytest.mark.django_db
def test_a_node_not_heard_from_is_never_drained(slurmctld):
    """Not hearing a node is the server's trouble (its agent, the broker, a queue): a warning, never a drain."""
    silent = finished_sweep(NODES, {("gpu-a", "gpu-c"): "offline", ("gpu-b", "gpu-c"): "offline"}, [C_OFFLINE])
    assert slurm.blamed_nodes(silent) == {}
    assert slurm.act_on_sweep(silent, "drain") == []
    assert slurmctld.sinfo_states()["node-c"][0] == "unknown" and not SlurmDrain.objects.exists()


@pytest.mark.django_db
def test_a_failure_the_pass_did_not_see_again_drains_nothing(slurmctld):
    """The same fail findings as a confirmed sweep's, but the pass did not look again (it was off, or the node
    was at its bound) or saw the pairs fine the second time: nothing is drained."""
    link = ("fail", "link_failed", "gpu-a<->gpu-b", "gpu-a<->gpu-b timeout at connect (connect_timeout)")
    unlooked = finished_sweep(NODES, {**BAD_C, ("gpu-a", "gpu-b"): "timeout"}, [C_DEAD, link])
    fine_again = finished_sweep(
        NODES, BAD_C, [C_DEAD], outcomes={("gpu-a", "gpu-c"): "transient", ("gpu-b", "gpu-c"): "transient"}
    )
    # A confirmed pair elsewhere does not confirm a finding about other pairs.
    other = finished_sweep(NODES, BAD_C, [link], outcomes=SEEN_AGAIN_C)
    for sweep in (unlooked, fine_again, other):
        assert slurm.blamed_nodes(sweep) == {}, sweep.pk
        assert slurm.act_on_sweep(sweep, "drain") == []
    assert {n: s[0] for n, s in slurmctld.sinfo_states().items()} == dict.fromkeys(
        ["node-a", "node-b", "node-c"], "unknown"
    )


@pytest.mark.django_db
def test_a_confirmed_dead_link_drains_both_its_ends_with_the_link_in_each_reason(slurmctld):
    text = "gpu-a<->gpu-b timeout at connect (connect_timeout): confirmed, gpu-a<->gpu-b"
    bad = finished_sweep(
        NODES,
        {("gpu-a", "gpu-b"): "timeout"},
        [("fail", "link_failed", "gpu-a<->gpu-b", text)],
        outcomes={("gpu-a", "gpu-b"): "confirmed"},
    )
    assert sorted(slurm.act_on_sweep(bad, "drain")) == ["drained node-a", "drained node-b"]
    states = slurmctld.sinfo_states()
    for node in ("node-a", "node-b"):
        assert states[node][0].startswith("drain"), states
        assert states[node][1].startswith(f"cluster-health sweep #{bad.pk}: gpu-a<->gpu-b timeout"), states
    assert states["node-c"][0] == "unknown"
    assert sorted(slurm.act_on_sweep(finished_sweep(NODES), "drain")) == ["resumed node-a", "resumed node-b"]


@pytest.mark.django_db
def test_a_slow_finding_drains_only_the_pairs_it_lists_when_they_were_confirmed(slurmctld):
    """A confirmed slow node (fail) drains it; the same finding over contended pairs drains nothing."""
    listed = ["gpu-a<->gpu-c", "gpu-b<->gpu-c"]
    text = "every link of gpu-c is slow next to its peers: median busbw 0.1 GB/s, 0.10 x the 1 GB/s ..."
    slow = ("fail", "slow_node", "gpu-c", text, listed)
    contended = finished_sweep(
        NODES, {k: "contended" for k in BAD_C}, [slow], outcomes=dict.fromkeys(BAD_C, "contended")
    )
    assert slurm.act_on_sweep(contended, "drain") == []
    confirmed = finished_sweep(NODES, dict.fromkeys(BAD_C, "degraded"), [slow], outcomes=SEEN_AGAIN_C)
    assert slurm.act_on_sweep(confirmed, "drain") == ["drained node-c"]
    assert "median busbw 0.1 GB/s" in slurmctld.sinfo_states()["node-c"][1]


@pytest.mark.django_db
def test_a_hang_diagnosis_by_slurm_job_asks_slurmctld_for_the_jobs_nodes(slurmctld):
    """``manage.py hang --slurm-job ID``: the nodes come from slurmctld's NodeList, through the node map; a job
    that runs nowhere (pending: no slurmd runs here) or does not exist is refused with what slurmctld says."""
    import subprocess

    from cluster_health import hang_diagnoses
    from cluster_health.models import Node

    for name in NODES:
        Node.objects.create(name=name, address="127.0.0.1")
    assert slurm._scontrol("show", "hostnames", "node-a,node-[1-2]").split() == ["node-a", "node-1", "node-2"]
    submitted = subprocess.run(
        ["sbatch", "--parsable", "--output=/dev/null", "-w", "node-a,node-b", "--wrap", "sleep 60"],
        env=slurmctld.env,
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    ).stdout.strip()
    with pytest.raises(hang_diagnoses.HangRequestError, match=f"job {submitted} is PENDING.*runs on no node now"):
        hang_diagnoses.request(slurm_job=submitted)
    with pytest.raises(hang_diagnoses.HangRequestError, match="slurmctld knows no job 999999"):
        hang_diagnoses.request(slurm_job="999999")
    with pytest.raises(hang_diagnoses.HangRequestError, match="is not a Slurm job id"):
        hang_diagnoses.request(slurm_job="12; rm -rf /")
    subprocess.run(["scancel", submitted], env=slurmctld.env, capture_output=True, timeout=30)


@pytest.mark.django_db
def test_a_running_jobs_nodelist_maps_back_to_registered_nodes(slurmctld, monkeypatch):
    """A running job needs a slurmd, which this machine has not: slurmctld's answer for one is recorded
    (the boundary), and the hostlist is expanded by the real scontrol."""
    from cluster_health import hang_diagnoses
    from cluster_health.models import Node

    for name in ("gpu-1", "gpu-2", "gpu-3"):
        Node.objects.create(name=name, address="127.0.0.1")
    recorded = (
        "JobId=81234 JobName=train UserId=ml(1000) JobState=RUNNING Reason=None Dependency=(null) "
        "NodeList=node-[1-2] BatchHost=node-1 NumNodes=2 NumCPUs=2"
    )
    real = slurm._scontrol
    monkeypatch.setattr(slurm, "_scontrol", lambda *args: recorded if args[:2] == ("show", "job") else real(*args))
    assert hang_diagnoses.slurm_job_nodes("81234") == ["gpu-1", "gpu-2"]  # node map s/^gpu-/node-/
