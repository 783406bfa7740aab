"""/healthz reports the database and the broker for load balancers and compose health checks."""

import pytest


@pytest.mark.django_db
@pytest.mark.parametrize(
    "redis_gone, code, status",
    [(False, 200, "ok"), (True, 503, "error")],
    ids=["ok-when-database-and-broker-answer", "503-naming-the-broker-when-redis-is-gone"],
)
def test_it_reports_the_database_and_the_broker(client, settings, redis_gone, code, status):
    from django.contrib.auth.models import User

    from devtools.services import free_port

    client.force_login(User.objects.create_user("ops", password="pw-ops-12345"))  # details are for logged-in users
    if redis_gone:
        settings.REDIS_URL = f"redis://127.0.0.1:{free_port()}/0"
    resp = client.get("/healthz")
    assert resp.status_code == code
    body = resp.json()
    assert body["status"] == status
    assert body["checks"]["database"]["ok"] is True
    assert body["checks"]["broker"]["ok"] is not redis_gone
    if redis_gone:
        assert "Connection" in body["checks"]["broker"]["error"]


@pytest.mark.django_db
def test_it_needs_no_login_and_accepts_only_get(client):
    assert client.get("/healthz").status_code == 200
    assert client.post("/healthz").status_code == 405


@pytest.mark.django_db
def test_anonymous_callers_get_ok_or_error_without_the_driver_error(client, settings):
    from devtools.services import free_port

    settings.REDIS_URL = f"redis://127.0.0.1:{free_port()}/0"
    body = client.get("/healthz").json()
    assert body == {"status": "error", "checks": {"database": {"ok": True}, "broker": {"ok": False}}}
