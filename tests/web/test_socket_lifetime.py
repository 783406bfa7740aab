"""A live page's WebSocket lives no longer than its login: it closes at the session's expiry, when the
session is deleted, and when its user is deactivated, deleted or given a new password; other users'
pages go on. Each test opens its pages through the ASGI application (session cookie, AuthMiddlewareStack,
the Redis channel layer), as a browser does."""

from __future__ import annotations

import asyncio
import time

import pytest
from asgiref.sync import async_to_sync, sync_to_async
from channels.layers import get_channel_layer
from channels.testing import WebsocketCommunicator
from django.contrib.auth.models import User
from django.contrib.sessions.models import Session
from django.test import Client

from cluster_health.asgi import application
from cluster_health.web import consumers
from tests.support import timing
from tests.support.dashboard_rows import PASSWORD, make_user

pytestmark = pytest.mark.django_db(transaction=True)

SWEEP = 11


@pytest.fixture
def hosts(settings):
    settings.ALLOWED_HOSTS = ["testserver", "localhost"]
    return settings


def logged_in(username: str, *, operator: bool = False, superuser: bool = False) -> tuple[Client, str]:
    """A client logged in as a new user, and its session key."""
    user = make_user(username, operator=operator)
    if superuser:
        User.objects.filter(pk=user.pk).update(is_staff=True, is_superuser=True)
    client = Client()
    assert client.login(username=username, password=PASSWORD)
    return client, client.session.session_key


async def open_page(session_key: str) -> WebsocketCommunicator:
    from django.conf import settings

    cookie = f"{settings.SESSION_COOKIE_NAME}={session_key}".encode()
    headers = [(b"cookie", cookie), (b"origin", b"http://localhost"), (b"host", b"localhost")]
    page = WebsocketCommunicator(application, f"/ws/sweeps/{SWEEP}/", headers=headers)
    connected, _ = await page.connect()
    assert connected and (await page.receive_json_from())["type"] == "hello"
    return page


async def send_update(b: str) -> None:
    await get_channel_layer().group_send(
        f"sweep.{SWEEP}",
        {"type": "sweep.update", "sweep": SWEEP, "status": "running", "pairs": [{"a": "n0", "b": b, "status": "ok"}]},
    )


@pytest.mark.timeout(60)
def test_it_closes_a_page_at_its_sessions_expiry_and_sends_nothing_due_after_it(hosts):
    _client, key = logged_in("viewer")
    session = _client.session
    session.set_expiry(5)  # long enough for the first frame on a loaded machine
    session.save()
    expires = Session.objects.get(session_key=key).expire_date.timestamp()

    async def follow():
        page = await open_page(key)
        await send_update("n1")
        before = await page.receive_json_from(timeout=timing.FRAME_S)
        # Delivered just before the expiry, its frame would go out just after: it must not.
        await asyncio.sleep(max(0.0, expires - time.time() - 0.1))
        await send_update("n2")
        closed = await page.receive_output(timeout=timing.FRAME_S + 1)
        at = time.time()
        quiet = await page.receive_nothing(timeout=0.5)
        await page.wait()
        return before, closed, at, quiet

    before, closed, at, quiet = async_to_sync(follow)()
    assert before["pairs"] == [{"a": "n0", "b": "n1", "status": "ok"}]
    assert closed == {"type": "websocket.close", "code": consumers.CLOSE_SESSION_EXPIRED}
    assert expires - 0.01 <= at < expires + timing.FRAME_S
    assert quiet


def deactivate(user: User, _key: str, _admin: Client) -> None:
    user.is_active = False
    user.save()


def delete_in_the_admin(user: User, _key: str, admin: Client) -> None:
    answer = admin.post(f"/admin/auth/user/{user.pk}/delete/", {"post": "yes"})
    assert answer.status_code == 302 and not User.objects.filter(pk=user.pk).exists()


def delete_its_session(_user: User, key: str, _admin: Client) -> None:
    Session.objects.filter(session_key=key).delete()


def change_its_password(user: User, _key: str, _admin: Client) -> None:
    user.set_password("another password 8812")
    user.save()


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    ("end_login", "code"),
    [
        (deactivate, consumers.CLOSE_USER_ENDED),
        (delete_in_the_admin, consumers.CLOSE_USER_ENDED),
        (delete_its_session, consumers.CLOSE_LOGGED_OUT),
        (change_its_password, consumers.CLOSE_USER_ENDED),
    ],
    ids=["deactivated", "deleted-in-the-admin", "session-deleted", "password-changed"],
)
def test_it_closes_a_users_pages_when_its_login_ends_and_no_one_elses(hosts, end_login, code):
    _viewer_client, viewer_key = logged_in("viewer")
    _other_client, other_key = logged_in("other")
    admin, _admin_key = logged_in("admin", superuser=True)
    viewer = User.objects.get(username="viewer")

    async def follow():
        page = await open_page(viewer_key)
        bystander = await open_page(other_key)
        await sync_to_async(end_login)(viewer, viewer_key, admin)
        closed = await page.receive_output(timeout=timing.FRAME_S)
        await send_update("n1")
        still = await bystander.receive_json_from(timeout=timing.FRAME_S)
        await bystander.disconnect()
        await page.wait()
        return closed, still

    closed, still = async_to_sync(follow)()
    assert closed == {"type": "websocket.close", "code": code}
    assert still["pairs"] == [{"a": "n0", "b": "n1", "status": "ok"}]  # another user's page goes on


@pytest.mark.timeout(60)
def test_saving_a_user_or_logging_out_works_while_the_channel_layer_is_down(hosts, settings, caplog):
    """Telling open pages is a courtesy to them: a user deactivated by a command run before Redis is up,
    or a logout while it restarts, still happens (the pages see it at their next recheck)."""
    settings.CHANNEL_LAYERS = {
        "default": {"BACKEND": "channels_redis.core.RedisChannelLayer", "CONFIG": {"hosts": ["redis://127.0.0.1:9"]}}
    }
    client, _key = logged_in("viewer")
    viewer = User.objects.get(username="viewer")
    viewer.is_active = False
    viewer.save()
    client.post("/accounts/logout/")
    assert not User.objects.get(username="viewer").is_active and "_auth_user_id" not in client.session
    assert "could not tell open pages" in caplog.text
