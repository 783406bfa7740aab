"""The live-update WebSocket: anonymous handshakes are refused; updates reach a browser batched."""

import asyncio

import pytest
from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from channels.testing import WebsocketCommunicator
from channels_redis.core import RedisChannelLayer

from cluster_health.asgi import application
from cluster_health.web import consumers
from tests.support import timing
from tests.support.dashboard_rows import make_user

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def viewer():
    return make_user("viewer", operator=False)


def frames_after(user, sweep_id: int, send, count: int = 1, consumer=consumers.SweepUpdatesConsumer) -> list[dict]:
    """The ``count`` frames ``user``'s page on the sweep gets once ``send()`` ran, each within ``timing.FRAME_S``.

    The page's socket is connected and its hello frame read before ``send()``, and closed after.
    """

    async def follow():
        communicator = WebsocketCommunicator(consumer.as_asgi(), f"/ws/sweeps/{sweep_id}/")
        communicator.scope["user"] = user
        communicator.scope["url_route"] = {"args": (), "kwargs": {"sweep_id": sweep_id}}
        connected, _ = await communicator.connect()
        assert connected
        assert (await communicator.receive_json_from())["type"] == "hello"
        await send()
        frames = [await communicator.receive_json_from(timeout=timing.FRAME_S) for _ in range(count)]
        await communicator.disconnect()
        return frames

    return async_to_sync(follow)()


def update(sweep_id: int, pairs: list[dict], progress: dict | None = None) -> dict:
    """A ``sweep.update`` group message for a running sweep whose ``pairs`` just closed."""
    return {
        "type": "sweep.update",
        "sweep": sweep_id,
        "status": "running",
        "verdict": "unknown",
        "progress": progress or {},
        "pairs": pairs,
    }


def test_it_refuses_an_anonymous_websocket():
    async def attempt():
        communicator = WebsocketCommunicator(application, "/ws/sweeps/1/")
        connected, _code = await communicator.connect()
        await communicator.disconnect()
        return connected

    assert not async_to_sync(attempt)()


def test_it_forwards_a_burst_of_updates_as_one_frame(viewer):
    async def burst():
        layer = get_channel_layer()
        for i in range(20):
            pair = {"a": "n0", "b": f"n{i + 1}", "status": "ok", "busbw_gbps": 1.0}
            await layer.group_send("sweep.7", update(7, [pair], {"pairs_done": i + 1, "pairs_total": 20}))

    [frame] = frames_after(viewer, 7, burst)
    assert frame["type"] == "update" and frame["sweep"] == 7
    assert len(frame["pairs"]) == 20
    assert frame["progress"]["pairs_done"] == 20


@pytest.mark.timeout(60)
def test_it_keeps_an_idle_websocket_open_over_the_redis_layer(viewer):
    """A page left open with nothing happening still gets the next update (no drop, no re-read)."""

    async def idle_then_update():
        # Idle longer than the layer's blocking read, which a socket timeout of the same length used to cut.
        await asyncio.sleep(RedisChannelLayer.brpop_timeout + 2)
        await get_channel_layer().group_send("sweep.8", update(8, [{"a": "n0", "b": "n1", "status": "ok"}]))

    assert "RedisChannelLayer" in get_channel_layer().__class__.__name__
    [frame] = frames_after(viewer, 8, idle_then_update)
    assert frame["type"] == "update" and frame["pairs"] == [{"a": "n0", "b": "n1", "status": "ok"}]


class _ArrivesWhileSending(consumers.SweepUpdatesConsumer):
    """An update handled while the first frame is being sent, as happens under a steady stream."""

    late = update(9, [{"a": "n0", "b": "n2", "status": "ok"}])

    async def send_json(self, content, close=False):
        await super().send_json(content, close)
        if content.get("type") == "update" and not getattr(self, "sent_late", False):
            self.sent_late = True
            await self.sweep_update(self.late)


@pytest.mark.timeout(30)
def test_it_sends_what_arrived_while_a_frame_was_being_sent(viewer):
    async def one_update():
        await get_channel_layer().group_send("sweep.9", update(9, [{"a": "n0", "b": "n1", "status": "ok"}]))

    first, second = frames_after(viewer, 9, one_update, count=2, consumer=_ArrivesWhileSending)
    assert first["pairs"] == [{"a": "n0", "b": "n1", "status": "ok"}]
    assert second["pairs"] == [{"a": "n0", "b": "n2", "status": "ok"}]  # not left behind


def test_logging_out_closes_the_sessions_open_pages_sockets(client, viewer, settings):
    """A page left open after logout would go on receiving every sweep's results: its socket is closed."""
    from asgiref.sync import sync_to_async

    from tests.support.dashboard_rows import PASSWORD

    settings.ALLOWED_HOSTS = ["testserver", "localhost"]
    assert client.login(username="viewer", password=PASSWORD)
    cookie = f"{settings.SESSION_COOKIE_NAME}={client.cookies[settings.SESSION_COOKIE_NAME].value}".encode()
    other = make_user("other", operator=False)

    async def session_ends():
        headers = [(b"cookie", cookie), (b"origin", b"http://localhost"), (b"host", b"localhost")]
        page = WebsocketCommunicator(application, "/ws/sweeps/9/", headers=headers)
        connected, _ = await page.connect()
        assert connected and (await page.receive_json_from())["type"] == "hello"
        bystander = WebsocketCommunicator(consumers.SweepUpdatesConsumer.as_asgi(), "/ws/sweeps/9/")
        bystander.scope["user"] = other
        bystander.scope["url_route"] = {"args": (), "kwargs": {"sweep_id": 9}}
        assert (await bystander.connect())[0] and (await bystander.receive_json_from())["type"] == "hello"
        await sync_to_async(client.post)("/accounts/logout/")
        closed = await page.receive_output(timeout=timing.FRAME_S)
        await get_channel_layer().group_send("sweep.9", update(9, [{"a": "n0", "b": "n1", "status": "ok"}]))
        still = await bystander.receive_json_from(timeout=timing.FRAME_S)  # another session's page goes on
        await bystander.disconnect()
        await page.wait()
        return closed, still

    closed, still = async_to_sync(session_ends)()
    assert closed == {"type": "websocket.close", "code": consumers.CLOSE_LOGGED_OUT}
    assert still["type"] != "hello"


def test_no_redis_key_names_a_pages_session(client, viewer, settings, redis_url):
    """Channels keeps a group's members under a key named after the group; a node's broker user may not list
    keys, but no key name carries the session id anyway: whoever read one would not hold a login."""
    import redis

    from tests.support.dashboard_rows import PASSWORD

    settings.ALLOWED_HOSTS = ["testserver", "localhost"]
    assert client.login(username="viewer", password=PASSWORD)
    session_key = client.cookies[settings.SESSION_COOKIE_NAME].value
    cookie = f"{settings.SESSION_COOKIE_NAME}={session_key}".encode()

    async def page_open_keys():
        headers = [(b"cookie", cookie), (b"origin", b"http://localhost"), (b"host", b"localhost")]
        page = WebsocketCommunicator(application, "/ws/sweeps/9/", headers=headers)
        connected, _ = await page.connect()
        assert connected and (await page.receive_json_from())["type"] == "hello"
        listing = redis.Redis.from_url(redis_url)
        names = [k.decode(errors="replace") for k in listing.scan_iter(count=1000)]
        listing.close()
        await page.disconnect()
        return names

    names = async_to_sync(page_open_keys)()
    assert any("group" in name for name in names), names  # the page's groups are there
    assert not [name for name in names if session_key in name]
