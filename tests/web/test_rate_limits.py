"""Every request that changes something counts against one budget a minute, per user (per address for
anyone not logged in): past it, each state-changing page and API answers 429 with Retry-After, and
other users, other addresses and every read go on."""

from __future__ import annotations

import time

import pytest
from django.core.cache import cache
from django.test import Client

from cluster_health.models import ApiToken, Node, Sweep
from tests.support.dashboard_rows import PASSWORD, make_user

pytestmark = pytest.mark.django_db

# Every view that changes state, as (method, path, body): pages, then the API.
CHANGES = [
    ("post", "/sweeps/new/", {}),
    ("post", "/sweeps/{sweep}/cancel/", {}),
    ("post", "/sweeps/{sweep}/rerun/", {}),
    ("post", "/nodes/n0/maintenance/", {"reason": "cabling"}),
    ("post", "/nodes/n0/activity/", {"active": "0"}),
    ("post", "/findings/1/acknowledge/", {"note": "known"}),
    ("post", "/schedules/new/", {}),
    ("post", "/hangs/", {}),
    ("post", "/api/sweeps", {}),
    ("post", "/api/sweeps/{sweep}/cancel", {}),
    ("post", "/api/nodes/n0/maintenance", {}),
    ("post", "/api/nodes/n0/return", {}),
    ("post", "/api/nodes/n0/retire", {}),
    ("post", "/api/nodes/n0/activate", {}),
    ("post", "/api/findings/1/acknowledge", {}),
    ("post", "/api/hangs", {}),
    ("delete", "/api/sweeps/{sweep}", {}),
]


def logged_in(username: str) -> Client:
    make_user(username, operator=True)
    client = Client()
    assert client.login(username=username, password=PASSWORD)
    return client


def within_one_minute() -> None:
    """Budgets renew on the minute: start a burst with at least 5 s of this minute left."""
    if (left := 60 - time.time() % 60) < 5:
        time.sleep(left + 0.1)


def test_a_burst_of_changes_is_refused_with_429_for_that_user_only(settings):
    from django.contrib.auth.models import User

    settings.ACTION_REQUESTS_PER_MINUTE = 2
    cache.clear()  # this process's cache (tests.settings): earlier tests' requests counted too
    Node.objects.create(name="n0", address="10.0.0.1")
    sweep = Sweep.objects.create(kind="connectivity", nodes=["n0"], status="finished", verdict="pass")
    alice, bob = logged_in("alice"), logged_in("bob")
    _, alices_token = ApiToken.issue(User.objects.get(username="alice"), "alice-ci", scope="operate")
    _, carols_token = ApiToken.issue(make_user("carol", operator=True), "carol-ci", scope="operate")
    within_one_minute()

    within = [alice.post("/nodes/n0/maintenance/", {"reason": "cabling"}), alice.post("/schedules/new/", {})]
    assert 429 not in [a.status_code for a in within]
    refused = {
        (method, path): getattr(alice, method)(path.format(sweep=sweep.pk), body) for method, path, body in CHANGES
    }
    assert {key: a.status_code for key, a in refused.items() if a.status_code != 429} == {}
    page, api = refused[("post", "/nodes/n0/maintenance/")], refused[("post", "/api/sweeps")]
    assert 0 < int(page["Retry-After"]) <= 60 and b"at most 2 a minute" in page.content
    assert 0 < int(api["Retry-After"]) <= 60 and "at most 2 a minute" in api.json()["error"]
    assert alice.get("/").status_code == 200  # reading is not counted
    assert not Sweep.objects.exclude(status="finished").exists()  # nothing past the budget ran

    # The user's token counts against the same budget; another user's has its own.
    def with_token(raw: str) -> int:
        return Client().post("/api/nodes/n0/return", HTTP_AUTHORIZATION=f"Bearer {raw}").status_code

    assert with_token(alices_token) == 429
    assert bob.post("/nodes/n0/maintenance/", {"reason": "cabling"}).status_code != 429
    carols = [with_token(carols_token) for _ in range(3)]
    assert 429 not in carols[:2] and carols[2] == 429, carols

    # Anyone not logged in counts against their address.
    anonymous = [Client(REMOTE_ADDR="192.0.2.7").post("/api/sweeps").status_code for _ in range(3)]
    assert anonymous == [401, 401, 429]
    assert Client(REMOTE_ADDR="192.0.2.8").post("/api/sweeps").status_code == 401
