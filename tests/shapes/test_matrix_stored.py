"""A closed sweep's stored matrix is the matrix of its rows, and the pages and the API serve it."""

import json

import pytest

from cluster_health import sweeps
from cluster_health.core import matrix
from cluster_health.models import PairProbe, Sweep, SweepMatrix
from cluster_health.shapes import documents, matrices
from devtools.sweep_driver import heartbeat, result_for
from tests.support.dashboard_rows import matrix_payload

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("memory_channel_layer")]


def answer(cmd):
    if "n3" in (cmd["node"],):
        return result_for(cmd, status="timeout", stage="connect", reason="connect_timeout", hint="firewall?")
    return result_for(cmd, busbw=1.0 + cmd["probe_id"] / 7, latency=100.0 + cmd["probe_id"] / 3)


def test_it_stores_the_matrix_of_the_rows_when_a_sweep_finishes(driver):
    for n in ("n0", "n1", "n2", "n3", "n10"):
        heartbeat(n)
    sweep = driver.sweep(kind="connectivity")
    driver.answer_all(answer)
    sweep.refresh_from_db()
    assert sweep.status == "finished"
    stored = json.loads(SweepMatrix.objects.get(sweep=sweep).payload)
    assert stored == matrix_payload(sweep.nodes, documents.pair_dicts(sweep))
    counts = matrix.status_counts(stored)
    assert counts == {"ok": 6, "timeout": 4}
    k = matrix.pair_index(stored["nodes"].index("n0"), stored["nodes"].index("n3"), 5)
    assert stored["details"][str(k)] == ["connect", "connect_timeout", "firewall?"]


def test_it_builds_an_open_sweep_from_its_rows_and_stores_a_cancelled_one_on_first_read(driver):
    for n in ("n0", "n1", "n2"):
        heartbeat(n)
    sweep = driver.sweep(kind="connectivity")
    first = driver.take()
    driver.ingest(result_for(first[0]))
    driver.ingest(result_for(first[1]))
    open_payload = json.loads(matrices.matrix_text(sweep))
    assert matrix.status_counts(open_payload)["ok"] == 1
    assert not SweepMatrix.objects.filter(sweep=sweep).exists()
    driver.run(sweeps.cancel, sweep.pk)
    sweep.refresh_from_db()
    closed = json.loads(matrices.matrix_text(sweep))
    assert SweepMatrix.objects.filter(sweep=sweep).exists()
    assert closed == matrix_payload(sweep.nodes, documents.pair_dicts(sweep))
    assert matrix.status_counts(closed) == {"ok": 1, "skipped": 2}


def test_it_serves_the_stored_matrix_from_the_api_and_the_sweep_page(driver, client, django_user_model):
    for n in ("n0", "n1"):
        heartbeat(n)
    sweep = driver.sweep(kind="connectivity")
    driver.answer_all()
    client.force_login(django_user_model.objects.create_user("viewer", password="pw-123456789"))
    # What is served is the stored text, even if a row were changed behind its back.
    PairProbe.objects.filter(sweep=sweep).update(status="failed")
    api = client.get(f"/api/sweeps/{sweep.pk}/matrix").json()
    state = client.get(f"/sweeps/{sweep.pk}/state.json").json()
    assert api["sweep"] == sweep.pk and api["verdict"] == "pass"
    assert matrix.status_counts(api) == matrix.status_counts(state["matrix"]) == {"ok": 1}
    assert state["sweep"] == sweep.pk and state["verdict"] == "pass"
    assert Sweep.objects.get(pk=sweep.pk).status == "finished"
