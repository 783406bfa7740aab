"""API tokens: `manage.py token issue/list/revoke`, expiry, read and operate scopes, the admin."""

from __future__ import annotations

import io
import json
from datetime import timedelta

import pytest
from django.contrib.auth.models import User
from django.core.management import CommandError, call_command
from django.utils import timezone

from cluster_health.models import ApiToken, Node, Sweep
from devtools.sweep_driver import heartbeat
from tests.support.dashboard_rows import make_user

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("memory_channel_layer")]


@pytest.fixture
def operator():
    return make_user("op", operator=True)


def token_cmd(*args) -> tuple[str, str]:
    out, err = io.StringIO(), io.StringIO()
    call_command("token", *args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


def issue(*args) -> str:
    return token_cmd("issue", *args)[0].strip()


def bearer(token):
    return {"HTTP_AUTHORIZATION": f"Bearer {token}"}


def test_issue_prints_a_working_token_once_and_stores_only_its_hash(client, operator):
    raw, note = token_cmd("issue", "op", "--scope", "read", "--expires-in", "30", "--name", "grafana")
    raw = raw.strip()
    assert raw.startswith("chk_") and "shown only now" in note and raw not in note
    token = ApiToken.objects.get(name="grafana")
    assert token.token_hash == ApiToken.hash(raw) and raw not in json.dumps(
        list(ApiToken.objects.values()), default=str
    )
    assert token.scope == "read" and token.user == operator
    assert timedelta(days=29, hours=23) < token.expires - timezone.now() <= timedelta(days=30)
    assert client.get("/api/nodes", **bearer(raw)).status_code == 200


def test_issue_refuses_an_unknown_user_a_taken_name_and_an_expiry_out_of_range(operator):
    with pytest.raises(CommandError, match="no user 'nobody'"):
        issue("nobody", "--scope", "read", "--expires-in", "30")
    issue("op", "--scope", "read", "--expires-in", "30", "--name", "ci")
    with pytest.raises(CommandError, match="'ci' exists already"):
        issue("op", "--scope", "read", "--expires-in", "30", "--name", "ci")
    with pytest.raises(CommandError, match="--expires-in: 0 is outside"):
        issue("op", "--scope", "read", "--expires-in", "0")


def test_list_shows_every_token_without_its_value(operator):
    raw = issue("op", "--scope", "operate", "--expires-in", "7", "--name", "ci")
    table, _ = token_cmd("list")
    assert "ci" in table and "operate" in table and raw not in table
    (listed,) = json.loads(token_cmd("list", "--json")[0])["tokens"]
    assert listed["name"] == "ci" and listed["user"] == "op" and listed["scope"] == "operate"
    assert listed["expired"] is False and raw not in json.dumps(listed)


def test_revoke_by_name_or_id_refuses_the_token_at_once(client, operator):
    by_name = issue("op", "--scope", "read", "--expires-in", "7", "--name", "ci")
    by_id = issue("op", "--scope", "read", "--expires-in", "7", "--name", "cron")
    token_cmd("revoke", "ci")
    token_cmd("revoke", str(ApiToken.objects.get(name="cron").pk))
    assert client.get("/api/nodes", **bearer(by_name)).status_code == 401
    assert client.get("/api/nodes", **bearer(by_id)).status_code == 401
    with pytest.raises(CommandError, match="no token 'ci'"):
        token_cmd("revoke", "ci")


def test_an_expired_token_is_refused_with_401_naming_the_expiry(client, operator):
    raw = issue("op", "--scope", "operate", "--expires-in", "1", "--name", "old")
    ApiToken.objects.filter(name="old").update(expires=timezone.now() - timedelta(seconds=1))
    r = client.get("/api/nodes", **bearer(raw))
    assert r.status_code == 401 and "expired" in r.json()["error"]
    assert "(expired)" in token_cmd("list")[0]


def test_a_read_token_reads_but_is_refused_every_operator_action(client, operator):
    heartbeat("n0", address="10.0.0.1"), heartbeat("n1", address="10.0.0.2")
    raw = issue("op", "--scope", "read", "--expires-in", "7", "--name", "dash")
    sweep = Sweep.objects.create(kind="connectivity", status="running")
    assert client.get(f"/api/sweeps/{sweep.pk}", **bearer(raw)).status_code == 200
    writes = [
        ("/api/sweeps", json.dumps({"kind": "connectivity"})),
        (f"/api/sweeps/{sweep.pk}/cancel", ""),
        ("/api/nodes/n0/retire", ""),
        ("/api/nodes/n0/activate", ""),
    ]
    for url, body in writes:
        r = client.post(url, data=body, content_type="application/json", **bearer(raw))
        assert r.status_code == 403 and "scope read" in r.json()["error"], url
    assert Sweep.objects.count() == 1 and Node.objects.get(name="n0").active
    assert Sweep.objects.get().status == "running"


def test_an_operate_token_of_an_operator_retires_a_node(client, operator):
    heartbeat("n0", address="10.0.0.1")
    raw = issue("op", "--scope", "operate", "--expires-in", "7")
    assert client.post("/api/nodes/n0/retire", **bearer(raw)).status_code == 200
    assert not Node.objects.get(name="n0").active


def test_the_admin_cannot_add_a_token_and_says_how_to_issue_one(client):
    client.force_login(User.objects.create_superuser("root", password="pw-root-12345"))
    assert client.get("/admin/cluster_health/apitoken/add/").status_code == 403
    page = client.get("/admin/cluster_health/apitoken/").content.decode()
    assert "manage.py token issue" in page
