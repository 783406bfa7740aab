"""Login throttling: repeated failed logins lock a user name and an address out of both login pages."""

from __future__ import annotations

import time
import uuid

import pytest
from django.contrib.auth.models import User
from django.core.cache import cache

pytestmark = pytest.mark.django_db

PASSWORD = "right-password-4471"
LOGIN = "/accounts/login/"
ADMIN_LOGIN = "/admin/login/"


@pytest.fixture(autouse=True)
def throttle(settings):
    settings.LOGIN_FAILURE_LIMIT = 5
    settings.LOGIN_FAILURE_WINDOW_S = 600
    settings.LOGIN_LOCKOUT_S = 600
    cache.clear()  # the tests' in-memory cache
    yield settings
    settings.CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}
    cache.clear()


@pytest.fixture
def alice():
    return User.objects.create_superuser("alice", password=PASSWORD)


def attempt(client, password, *, username="alice", url=LOGIN, address="10.1.0.1"):
    return client.post(url, {"username": username, "password": password}, REMOTE_ADDR=address)


def logged_in(client) -> bool:
    return "_auth_user_id" in client.session


def assert_locked_out(client, response) -> None:
    """Refused with 429 and the lockout message, and not logged in."""
    assert response.status_code == 429
    assert "Too many failed logins" in response.content.decode()
    assert not logged_in(client)


def test_it_refuses_the_right_password_after_five_failures_with_429_and_a_clear_message(client, alice):
    for _ in range(5):
        assert attempt(client, "wrong").status_code == 200
    response = attempt(client, PASSWORD)
    assert_locked_out(client, response)
    assert int(response["Retry-After"]) > 0


def test_it_still_lets_the_user_in_after_four_failures(client, alice):
    for _ in range(4):
        attempt(client, "wrong")
    assert attempt(client, PASSWORD).status_code == 302
    assert logged_in(client)


def test_failures_on_the_dashboard_login_lock_the_admin_login_too(client, alice):
    for _ in range(5):
        attempt(client, "wrong")
    assert_locked_out(client, attempt(client, PASSWORD, url=ADMIN_LOGIN))


def test_failures_on_the_admin_login_lock_the_user_name(client, alice):
    for _ in range(5):
        assert attempt(client, "wrong", url=ADMIN_LOGIN).status_code == 200
    assert attempt(client, PASSWORD, url=ADMIN_LOGIN).status_code == 429
    assert attempt(client, PASSWORD).status_code == 429


@pytest.mark.parametrize(
    "failures, then, elsewhere",
    [
        # a locked user name is refused from every address
        ({"address": "10.2.0.{i}"}, {"address": "10.3.0.1"}, None),
        # one address guessing many user names is locked out for every one, and only that address is
        ({"username": "guess{i}"}, {}, {"address": "10.9.9.9"}),
    ],
)
def test_five_failures_lock_the_user_name_or_the_address_they_share(client, alice, failures, then, elsewhere):
    for i in range(5):
        attempt(client, "wrong", **{k: v.format(i=i) for k, v in failures.items()})
    assert attempt(client, PASSWORD, **then).status_code == 429
    if elsewhere is not None:
        assert attempt(client, PASSWORD, **elsewhere).status_code == 302


def test_a_successful_login_resets_the_user_names_count(client, alice):
    for i in range(4):
        attempt(client, "wrong", address=f"10.4.0.{i}")
    assert attempt(client, PASSWORD, address="10.4.1.1").status_code == 302
    client.logout()
    for i in range(4):
        attempt(client, "wrong", address=f"10.5.0.{i}")
    assert attempt(client, PASSWORD, address="10.5.1.1").status_code == 302


def test_the_lockout_ends_after_its_period(client, alice, throttle):
    throttle.LOGIN_LOCKOUT_S = 1
    for _ in range(5):
        attempt(client, "wrong")
    assert attempt(client, PASSWORD).status_code == 429
    time.sleep(1.1)
    assert attempt(client, PASSWORD).status_code == 302


def test_behind_a_tls_proxy_the_address_is_the_proxys_last_forwarded_hop(client, alice, throttle):
    throttle.BEHIND_TLS_PROXY = True
    for i in range(5):
        client.post(
            LOGIN,
            {"username": f"guess{i}", "password": "wrong"},
            REMOTE_ADDR="10.0.0.254",
            HTTP_X_FORWARDED_FOR=f"1.2.3.{i}, 192.0.2.7",
        )
    locked = client.post(
        LOGIN, {"username": "alice", "password": PASSWORD}, REMOTE_ADDR="10.0.0.254", HTTP_X_FORWARDED_FOR="192.0.2.7"
    )
    assert locked.status_code == 429
    other = client.post(
        LOGIN, {"username": "alice", "password": PASSWORD}, REMOTE_ADDR="10.0.0.254", HTTP_X_FORWARDED_FOR="192.0.2.8"
    )
    assert other.status_code == 302


def test_the_lockout_holds_with_the_redis_cache_of_production(client, alice, throttle, redis_url):
    throttle.CACHES = {
        "default": {
            "BACKEND": "django.core.cache.backends.redis.RedisCache",
            "LOCATION": redis_url,
            "KEY_PREFIX": f"login-test-{uuid.uuid4().hex}",  # never FLUSHDB: the session's Redis is shared
        }
    }
    for i in range(5):
        attempt(client, "wrong", address=f"10.6.0.{i}")
    assert attempt(client, PASSWORD, address="10.6.1.1").status_code == 429
