"""JSON API: auth by session or token, operator permission, bounds, matrix, history, CSV."""

import json

import pytest
from django.contrib.auth.models import Group, User

from cluster_health.core.matrix import decode
from cluster_health.models import ApiToken, Sweep
from devtools.sweep_driver import heartbeat
from tests.support.dashboard_rows import make_user

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("memory_channel_layer")]


@pytest.fixture
def viewer():
    return User.objects.create_user("viewer", password="pw-viewer-123")


@pytest.fixture
def operator_token():
    return ApiToken.issue(make_user("op", operator=True), "ci", scope=ApiToken.OPERATE)[1]


def bearer(token):
    return {"HTTP_AUTHORIZATION": f"Bearer {token}"}


def test_it_requires_login_or_token(client):
    assert client.get("/api/nodes").status_code == 401
    assert client.get("/api/nodes", **bearer("chk_wrong")).status_code == 401


def test_it_lists_nodes_for_a_logged_in_user(client, viewer):
    heartbeat("n0", address="10.0.0.1")
    client.force_login(viewer)
    data = client.get("/api/nodes").json()
    assert data["nodes"][0]["name"] == "n0" and data["nodes"][0]["online"] is True


def test_it_refuses_to_start_a_sweep_without_the_operator_permission(client, viewer):
    client.force_login(viewer)
    r = client.post("/api/sweeps", data="{}", content_type="application/json")
    assert r.status_code == 403
    assert Sweep.objects.count() == 0


def test_it_starts_a_sweep_with_an_operator_token(client, operator_token, driver):
    heartbeat("n0"), heartbeat("n1")
    r = driver.run(
        client.post,
        "/api/sweeps",
        data=json.dumps({"kind": "connectivity"}),
        content_type="application/json",
        **bearer(operator_token),
    )
    assert r.status_code == 201, r.content
    sweep = Sweep.objects.get(pk=r.json()["sweep"])
    assert sweep.source == "api" and sweep.requested_by.username == "op"
    assert driver.server_tasks == [("cluster_health.start_sweep", {"sweep_id": sweep.pk})]


@pytest.mark.parametrize(
    "body,field",
    [
        ({"kind": "everything"}, "kind"),
        ({"sizes": [1, 2]}, "sizes"),
        ({"iterations": 100000}, "iterations"),
        ({"nodes": ["bad name"]}, "nodes"),
        ({"colour": "red"}, "colour"),
        ({"timeouts": {"connect": 10**6}}, "connect"),
        ({"kind": "sampled", "rounds": 0}, "rounds"),
        ({"kind": "sampled", "seed": -1}, "seed"),
        ({"kind": "sampled", "seed": "7"}, "seed"),
        ({"kind": "full", "rounds": 4}, "rounds"),
        ({"confirm_after_s": 3600}, "confirm_after_s"),
        ({"confirm_after_s": "5"}, "confirm_after_s"),
    ],
)
def test_it_answers_out_of_bounds_parameters_with_a_clear_400(client, operator_token, body, field):
    r = client.post("/api/sweeps", data=json.dumps(body), content_type="application/json", **bearer(operator_token))
    assert r.status_code == 400
    assert field in r.json()["error"]


def test_it_bounds_list_parameters(client, viewer):
    client.force_login(viewer)
    assert client.get("/api/sweeps?limit=100000").status_code == 400
    assert client.get("/api/sweeps?status=bogus").status_code == 400


def test_it_serves_matrix_history_csv_and_cancel(client, operator_token, driver):
    for n in ("n0", "n1", "n2"):
        heartbeat(n)
    sweep = driver.sweep(kind="connectivity")
    driver.answer_all()
    matrix = client.get(f"/api/sweeps/{sweep.pk}/matrix", **bearer(operator_token)).json()
    assert matrix["nodes"] == ["n0", "n1", "n2"] and matrix["sweep"] == sweep.pk
    status, busbw = decode(matrix["status"], "B"), decode(matrix["busbw_gbps"], "f")
    assert len(status) == len(busbw) == 3
    assert {matrix["status_codes"][c] for c in status} == {"ok"}
    detail = client.get(f"/api/sweeps/{sweep.pk}", **bearer(operator_token)).json()
    assert detail["verdict"] == "pass" and len(detail["pairs"]) == 3
    history = client.get("/api/pairs/n1/n0/history", **bearer(operator_token)).json()["history"]
    assert len(history) == 1 and history[0]["sweep"] == sweep.pk
    csv_body = b"".join(client.get(f"/api/sweeps/{sweep.pk}/pairs.csv", **bearer(operator_token)).streaming_content)
    assert csv_body.decode().splitlines()[0].startswith("sweep,round,a,b,status")
    assert client.post(f"/api/sweeps/{sweep.pk}/cancel", **bearer(operator_token)).status_code == 409
    running = driver.sweep(kind="connectivity")
    r = driver.run(client.post, f"/api/sweeps/{running.pk}/cancel", **bearer(operator_token))
    assert r.status_code == 200 and r.json()["status"] == "cancelled"


def test_it_checks_csrf_for_session_writes(viewer):
    from django.test import Client

    strict = Client(enforce_csrf_checks=True)
    user = User.objects.get(username="viewer")
    user.groups.add(Group.objects.get(name="operators"))
    strict.force_login(user)
    r = strict.post("/api/sweeps", data="{}", content_type="application/json")
    assert r.status_code == 403 and "CSRF" in r.json()["error"]
