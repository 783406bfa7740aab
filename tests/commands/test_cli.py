"""manage.py sweep / nodes / prune: text matrix with legend, JSON, exit codes, retention."""

import json
from datetime import timedelta

import pytest
from django.core.management import call_command
from django.utils import timezone

from cluster_health.core import textmatrix
from cluster_health.models import PairProbe, Sweep
from cluster_health.retention import prune
from cluster_health.shapes import documents
from devtools.sweep_driver import Driver, heartbeat, result_for

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("memory_channel_layer")]


@pytest.fixture
def finished(django_capture_on_commit_callbacks):
    driver = Driver(django_capture_on_commit_callbacks)
    for n in ("n0", "n1", "n2"):
        heartbeat(n)
    sweep = driver.sweep(kind="connectivity")
    driver.answer_all(
        lambda c: (
            result_for(c, status="failed", stage="connect", reason="refused", hint="n0 cannot reach 127.0.0.1:1")
            if {c["node"], c["peers"][0]["name"]} == {"n0", "n2"}
            else result_for(c)
        )
    )
    sweep.refresh_from_db()
    return sweep


def test_it_renders_a_matrix_with_a_legend(finished):
    text = textmatrix.render(documents.sweep_json(finished))
    assert "verdict FAIL" in text
    assert "legend: . ok" in text
    assert "n0<->n2: failed at connect (refused)" in text
    row_n0 = next(line for line in text.splitlines() if line.startswith("n0"))
    assert row_n0.split()[2:] == [".", "X"]


def test_it_prints_nodes_as_json(capsys):
    heartbeat("n0", address="10.1.1.1")
    call_command("nodes", "--json")
    data = json.loads(capsys.readouterr().out)
    assert data["nodes"][0]["address"] == "10.1.1.1" and data["nodes"][0]["online"]


def test_it_requests_a_sweep_without_waiting(capsys, django_capture_on_commit_callbacks):
    heartbeat("n0"), heartbeat("n1")
    Driver(django_capture_on_commit_callbacks).run(call_command, "sweep", "--kind", "quick", "--json")
    data = json.loads(capsys.readouterr().out)
    assert data["status"] == "pending" and Sweep.objects.get(pk=data["sweep"]).source == "command"


def test_it_exits_with_the_verdicts_code(finished, monkeypatch):
    from cluster_health import sweeps

    monkeypatch.setattr(sweeps, "request_sweep", lambda **kw: finished)
    with pytest.raises(SystemExit) as exc:
        call_command("sweep", "--wait", "--json")
    assert exc.value.code == 2


def test_it_prunes_raw_detail_and_keeps_summaries(finished):
    assert prune(30) == {"pairs": 0, "groups": 0, "rejected": 0, "collapsed": {"sweeps": 0, "rows": 0}}
    Sweep.objects.filter(pk=finished.pk).update(created=timezone.now() - timedelta(days=40))
    PairProbe.objects.filter(sweep=finished).update(evidence={"retransmits": 3})
    assert prune(30)["pairs"] == 3
    probe = PairProbe.objects.filter(sweep=finished, status="ok").first()
    assert probe.half_a is None and probe.sizes is None and probe.evidence is None and probe.pruned
    assert probe.latency_us_p50 is not None and probe.status == "ok"
    failed = PairProbe.objects.get(sweep=finished, status="failed")
    assert failed.half_a is None and failed.pruned and failed.evidence == {"retransmits": 3}  # what findings rest on


def pair_results(sweep):
    """What a reader of the sweep sees of each pair: status, stage, reason, hint, busbw, algbw and latency."""
    out = {}
    for p in documents.sweep_json(sweep)["pairs"]:
        key = tuple(sorted((p["a"], p["b"])))
        out[key] = tuple(p[f] for f in ("status", "stage", "reason", "hint", "busbw_gbps", "algbw_gbps", "latency_us"))
    return out


def test_a_sweep_past_its_pair_rows_days_collapses_into_its_matrix_and_reads_the_same(finished, client):
    from django.contrib.auth.models import User

    from cluster_health.models import BaselinePair, SweepMatrix
    from cluster_health.sweeps import baselines

    before, progress = pair_results(finished), finished.progress()
    stored = SweepMatrix.objects.get(sweep=finished).payload

    def measured(baseline):
        rows = BaselinePair.objects.filter(baseline=baseline).values_list("node_a", "node_b", "busbw_gbps")
        return {(a, b): bw for a, b, bw in rows}

    base = measured(baselines.baseline_from_sweep(finished))
    assert len(base) == 2
    Sweep.objects.filter(pk=finished.pk).update(created=timezone.now() - timedelta(days=100))
    assert prune(30, pair_rows_days=60)["collapsed"] == {"sweeps": 1, "rows": 2}
    finished.refresh_from_db()
    kept = PairProbe.objects.filter(sweep=finished)
    assert [(p.status, p.hint) for p in kept] == [("failed", "n0 cannot reach 127.0.0.1:1")]  # failures keep rows
    assert pair_results(finished) == before and documents.sweep_json(finished)["collapsed"] is True
    assert SweepMatrix.objects.get(sweep=finished).payload == stored
    assert finished.progress()["counts"] == progress["counts"]
    assert measured(baselines.baseline_from_sweep(finished)) == base
    assert prune(30, pair_rows_days=60)["collapsed"] == {"sweeps": 0, "rows": 0}
    client.force_login(User.objects.create_user("viewer", password="x"))
    page = client.get(f"/api/sweeps/{finished.pk}/pairs?offset=2&limit=1").json()
    assert page["total"] == 3 and len(page["pairs"]) == 1 and page["next"] is None
    whole = client.get(f"/api/sweeps/{finished.pk}/pairs?limit=10").json()["pairs"]
    assert sorted(tuple(sorted((p["a"], p["b"]))) for p in whole) == sorted(before)


def test_an_open_or_recent_sweep_is_never_collapsed(finished):
    assert prune(30, pair_rows_days=60)["collapsed"] == {"sweeps": 0, "rows": 0}
    Sweep.objects.filter(pk=finished.pk).update(created=timezone.now() - timedelta(days=100), status="running")
    assert prune(30, pair_rows_days=60)["collapsed"] == {"sweeps": 0, "rows": 0}
    assert prune(30, pair_rows_days=0)["collapsed"] == {"sweeps": 0, "rows": 0}  # 0: never
    assert PairProbe.objects.filter(sweep=finished).count() == 3
