"""The ``gpu`` sweep kind: one check per node planned and sent, results applied through the signed ingest path,
the reaper closing silence, findings naming the GPU, the verdict, the sweep JSON, and the Slurm drain.

The fleet is five 8-GPU H100 nodes on recorded NVML facts and check figures (tests/support/gpu_fleet.py).
"""

from datetime import timedelta

import pytest
from django.utils import timezone

from cluster_health import tasks
from cluster_health.actions import alerts, slurm
from cluster_health.actions.models import Alert
from cluster_health.core import textmatrix
from cluster_health.models import GpuCheck, Node, RejectedMessage, Sweep
from cluster_health.queues import dispatch
from cluster_health.shapes import documents
from cluster_health.sweeps import outbox, waiting
from devtools.sweep_driver import heartbeat
from tests.support import gpu_fleet
from tests.support.action_fixtures import SlurmCluster
from tests.support.gpu_fleet import gpu_sweep, through_the_ingest_queue

pytestmark = pytest.mark.django_db


def test_it_sends_one_signed_check_per_node_sized_by_its_gpus(driver):
    heartbeat("cpu-1")
    sweep, commands = gpu_sweep(driver, {"gpu-001": "h100_node"})
    assert sorted(commands) == ["cpu-1", "gpu-001"]
    assert {c["kind"] for c in commands.values()} == {"gpu"}
    # init, then memory + matmul + copy once per GPU, the GPU x GPU matrix, process start: capped at 900 s
    assert commands["gpu-001"]["deadline_s"] == min(900, 60 + 8 * 90 + 120 + 15)
    assert commands["cpu-1"]["deadline_s"] == 60 + 90 + 15  # one GPU at most: no matrix
    assert sweep.__class__.objects.get(pk=sweep.pk).total_rounds == 1
    assert set(GpuCheck.objects.filter(sweep=sweep).values_list("status", flat=True)) == {"running"}


def test_a_fleet_of_cpu_nodes_passes_with_every_check_skipped(driver):
    sweep, commands = gpu_sweep(driver, {"cpu-1": "cpu_node", "cpu-2": "cpu_node"})
    got = through_the_ingest_queue(driver, [gpu_fleet.skipped_result(c) for c in commands.values()])
    assert got == ["final", "final"]
    sweep.refresh_from_db()
    assert (sweep.status, sweep.verdict) == ("finished", "pass")
    report = documents.sweep_json(sweep)
    assert [(g["node"], g["status"], g["reason"]) for g in report["gpus"]] == [
        ("cpu-1", "skipped", "no_gpu"),
        ("cpu-2", "skipped", "no_gpu"),
    ]


def test_the_recorded_8_gpu_fleet_names_the_faulty_gpus_and_fails(driver):
    sweep, commands = gpu_sweep(driver, gpu_fleet.FLEET)
    sweep.refresh_from_db()
    line = f"sweep {sweep.pk}: running, round 1 of 1, checks 0/6 done, 0 failures so far"
    assert waiting.progress_line(sweep) == line
    results = [gpu_fleet.check_result(commands[n], rec) for n, rec in gpu_fleet.FLEET.items()]
    assert through_the_ingest_queue(driver, results) == ["final"] * 6
    sweep.refresh_from_db()
    assert (sweep.status, sweep.verdict) == ("finished", "fail")
    report = documents.sweep_json(sweep)
    fails = {(f["subject"], f["text"].split(":")[0]) for f in report["findings"] if f["severity"] == "fail"}
    assert fails == {
        ("gpu-003", "NVLink links 7 down on GPU 3 of gpu-003 (17 active where its peers have 18)"),
        ("gpu-004", "gpu-004 has 7 GPUs where its peers have 8 (00000000"),
        ("gpu-006", "gpu-006 GPU 3↔5"),
    }
    missing = next(f["text"] for f in report["findings"] if f["subject"] == "gpu-004")
    assert missing.startswith("gpu-004 has 7 GPUs where its peers have 8 (00000000:48:00.0, where its peers have one")
    pair = next(f["text"] for f in report["findings"] if f["subject"] == "gpu-006")
    assert pair == (
        "gpu-006 GPU 3↔5: 26 GB/s peer-to-peer copy where its other NVLink pairs run 380 and GPU 3↔5 of 5 peers "
        "380 GB/s: no peer access between them (ACS or the IOMMU routes the pair through the CPU)"
    )
    warns = [f["text"] for f in report["findings"] if f["severity"] == "warn" and f["subject"] == "gpu-005"]
    assert any(t.startswith("GPU 2 of gpu-005 runs PCIe Gen4 x8 where its peers") for t in warns)
    assert "gpu check degraded on gpu-005: GPU 2: pinned copies on GPU 2 run 13.2 GB/s" in " ".join(warns)
    assert any(t.startswith("GPU 2 of gpu-005 (NVIDIA H100 80GB HBM3) is slow at host-to-device copy") for t in warns)
    assert not [f for f in report["findings"] if f["subject"] in ("gpu-001", "gpu-002")]
    # The sweep JSON: every GPU with its model's median beside it, the slow one marked.
    by_node = {g["node"]: g for g in report["gpus"]}
    assert {n: g["status"] for n, g in by_node.items() if g["status"] != "ok"} == {"gpu-005": "degraded"}
    assert [len(by_node[n]["devices"]) for n in gpu_fleet.FLEET] == [8, 8, 8, 7, 8, 8]
    slow = by_node["gpu-005"]["devices"][2]
    assert slow["h2d_gbps"] == 13.2 and slow["fleet_median"]["h2d_gbps"] == pytest.approx(54.8, abs=0.3)
    assert slow["slow"] == ["h2d_gbps", "d2h_gbps"]
    assert all(d["slow"] == [] for n in ("gpu-001", "gpu-002") for d in by_node[n]["devices"])
    # manage.py sweep --kind gpu --wait without --json: a line per node, one per GPU
    text = textmatrix.render(report)
    assert "gpu check gpu-005: degraded (below_baseline) - GPU 2: pinned copies" in text
    assert "  GPU 2 NVIDIA H100 80GB HBM3: degraded, bf16_tflops 794.4, fp16_tflops 766.1, h2d_gbps 13.2 (slow)" in text


def test_a_full_sweep_reports_the_fleets_gpu_findings_too(driver):
    for name, recording in {"n0": "h100_node", "n1": "h100_node", "n2": "nvlink_lane_down"}.items():
        heartbeat(name, facts=gpu_fleet.facts(recording))
    sweep = driver.sweep(kind="full", sizes=[1024])
    driver.answer_all()
    sweep.refresh_from_db()
    found = [(f.severity, f.code, f.subject, f.text.split(":")[0]) for f in sweep.findings.filter(code="gpu_facts")]
    assert found == [
        ("fail", "gpu_facts", "n2", "NVLink links 7 down on GPU 3 of n2 (17 active where its peers have 18)")
    ]
    assert sweep.verdict == "fail"


def test_a_duplicate_a_stranger_and_a_forgery_change_nothing(driver):
    sweep, commands = gpu_sweep(driver, {"gpu-001": "h100_node", "gpu-002": "h100_node"})
    mine = gpu_fleet.check_result(commands["gpu-001"], "h100_node")
    assert through_the_ingest_queue(driver, [mine]) == ["final"]
    assert through_the_ingest_queue(driver, [mine]) == ["late"]
    stolen = {**gpu_fleet.check_result(commands["gpu-002"], "h100_node"), "node": "gpu-001"}
    assert through_the_ingest_queue(driver, [stolen]) == ["rejected"]
    assert RejectedMessage.objects.filter(error__contains="gpu-002's, not gpu-001").exists()
    check = GpuCheck.objects.get(sweep=sweep, node__name="gpu-002")
    assert check.status == "running" and check.result is None


def test_the_reaper_closes_a_silent_check_and_an_offline_node(driver):
    sweep, commands = gpu_sweep(driver, {"gpu-001": "h100_node", "gpu-002": "h100_node", "gpu-003": "h100_node"})
    through_the_ingest_queue(driver, [gpu_fleet.check_result(commands["gpu-001"], "h100_node")])
    later = timezone.now() + timedelta(seconds=dispatch.server_deadline_s(commands["gpu-002"]["deadline_s"]) + 1)
    Node.objects.exclude(name="gpu-003").update(last_heartbeat=later)  # gpu-003 went silent
    counts = driver.reap(later)
    assert counts["gpu_checks"] == 2
    closed = dict(GpuCheck.objects.filter(sweep=sweep).values_list("node__name", "status"))
    assert closed == {"gpu-001": "ok", "gpu-002": "timeout", "gpu-003": "offline"}
    sweep.refresh_from_db()
    assert (sweep.status, sweep.verdict) == ("finished", "fail")


def test_the_real_slurmctld_drains_the_node_with_the_gpu_in_its_reason(driver, tmp_path, monkeypatch, settings):
    cluster = SlurmCluster(tmp_path / "slurm", list(gpu_fleet.FLEET)).start()
    monkeypatch.setenv("SLURM_CONF", str(cluster.conf))
    settings.SLURM_NODE_MAP = ""
    try:
        sweep = gpu_fleet.recorded_sweep(driver, {n: r for n, r in gpu_fleet.FLEET.items() if n != "gpu-004"})
        assert sorted(slurm.act_on_sweep(sweep, "drain")) == ["drained gpu-003", "drained gpu-006"]
        states = cluster.sinfo_states()
        assert states["gpu-003"][0] == states["gpu-006"][0] == "drained"
        assert states["gpu-003"][1].startswith(
            f"cluster-health sweep #{sweep.pk}: NVLink links 7 down on GPU 3 of gpu-003"
        )
        assert states["gpu-006"][1].startswith(f"cluster-health sweep #{sweep.pk}: gpu-006 GPU 3↔5: 26 GB/s")
        assert cluster.sinfo_states()["gpu-005"][0] != "drained"  # a PCIe link below its peers warns only
    finally:
        cluster.stop()


def test_its_findings_open_one_alert_per_faulty_node_naming_the_gpu(driver):
    sweep = gpu_fleet.recorded_sweep(driver)
    alerts.evaluate_sweep(sweep)
    opened = {a.key: a for a in Alert.objects.filter(status="open")}
    assert set(opened) == {"gpu:gpu-003", "gpu:gpu-004", "gpu:gpu-005", "gpu:gpu-006"}
    assert opened["gpu:gpu-003"].severity == "fail" and "GPU 3 of gpu-003" in opened["gpu:gpu-003"].text
    assert opened["gpu:gpu-005"].severity == "warn" and "GPU 2 of gpu-005" in opened["gpu:gpu-005"].text


def test_a_beat_schedule_runs_a_gpu_sweep(driver):
    heartbeat("gpu-001", facts=gpu_fleet.facts("h100_node"))
    pk = driver.run(tasks.scheduled_sweep, kind="gpu")  # what a periodic task with kwargs {"kind": "gpu"} calls
    sweep = Sweep.objects.get(pk=pk)
    assert (sweep.kind, sweep.source) == ("gpu", "schedule")
    assert ("gpu", "gpu") in Sweep.KIND_CHOICES


def test_a_check_its_worker_never_marked_sent_is_sent_again_with_the_same_deadline_rule(driver):
    sweep, first = gpu_sweep(driver, {"gpu-001": "h100_node", "gpu-002": "h100_node"})
    GpuCheck.objects.filter(sweep=sweep, node__name="gpu-002").update(sent_at=None)  # killed before the mark
    later = timezone.now() + timedelta(seconds=outbox.UNSENT_GRACE_S + 1)
    Node.objects.update(last_heartbeat=later)
    assert driver.reap(later)["resent"] == 1
    [again] = driver.take()
    assert (again["node"], again["probe_id"], again["deadline_s"]) == (
        "gpu-002",
        first["gpu-002"]["probe_id"],
        first["gpu-002"]["deadline_s"],
    )
    assert through_the_ingest_queue(driver, [gpu_fleet.check_result(again, "h100_node")]) == ["final"]
    assert driver.reap(later)["resent"] == 0
