"""/healthz reports the database and the broker for load balancers and compose health checks."""

import pytest


@pytest.mark.django_db
def test_it_reports_ok_when_database_and_broker_answer(client):
    resp = client.get("/healthz")
    assert resp.status_code == 200
    body = resp.json()
    assert body["status"] == "ok"
    assert body["checks"]["database"]["ok"] is True
    assert body["checks"]["broker"]["ok"] is True


@pytest.mark.django_db
def test_it_is_503_naming_the_broker_when_redis_is_gone(client, settings):
    from tests.services import free_port

    settings.REDIS_URL = f"redis://127.0.0.1:{free_port()}/0"
    resp = client.get("/healthz")
    assert resp.status_code == 503
    body = resp.json()
    assert body["status"] == "error"
    assert body["checks"]["database"]["ok"] is True
    assert body["checks"]["broker"]["ok"] is False
    assert "Connection" in body["checks"]["broker"]["error"]


@pytest.mark.django_db
def test_it_needs_no_login_and_accepts_only_get(client):
    assert client.get("/healthz").status_code == 200
    assert client.post("/healthz").status_code == 405
