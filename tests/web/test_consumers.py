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
