"""The live-update WebSocket: anonymous handshakes are refused; updates reach a browser batched."""

import asyncio

import pytest
from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from channels.testing import WebsocketCommunicator
from channels_redis.core import RedisChannelLayer

from cluster_health.asgi import application
from cluster_health.web import consumers
from tests import timing
from tests.dashboard_rows import make_user

pytestmark = pytest.mark.django_db(transaction=True)


def test_it_refuses_an_anonymous_websocket():
    async def attempt():
        communicator = WebsocketCommunicator(application, "/ws/sweeps/1/")
        connected, _code = await communicator.connect()
        await communicator.disconnect()
        return connected

    assert not async_to_sync(attempt)()


def test_it_forwards_a_burst_of_updates_as_one_frame():
    user = make_user("viewer", operator=False)

    async def follow():
        app = consumers.SweepUpdatesConsumer.as_asgi()
        communicator = WebsocketCommunicator(app, "/ws/sweeps/7/")
        communicator.scope["user"] = user
        communicator.scope["url_route"] = {"args": (), "kwargs": {"sweep_id": 7}}
        connected, _ = await communicator.connect()
        assert connected
        assert (await communicator.receive_json_from())["type"] == "hello"
        layer = get_channel_layer()
        for i in range(20):
            await layer.group_send(
                "sweep.7",
                {
                    "type": "sweep.update",
                    "sweep": 7,
                    "status": "running",
                    "verdict": "unknown",
                    "progress": {"pairs_done": i + 1, "pairs_total": 20},
                    "pairs": [{"a": "n0", "b": f"n{i + 1}", "status": "ok", "busbw_gbps": 1.0}],
                },
            )
        frame = await communicator.receive_json_from(timeout=timing.FRAME_S)
        await communicator.disconnect()
        return frame

    frame = async_to_sync(follow)()
    assert frame["type"] == "update" and frame["sweep"] == 7
    assert len(frame["pairs"]) == 20
    assert frame["progress"]["pairs_done"] == 20


@pytest.mark.timeout(60)
def test_it_keeps_an_idle_websocket_open_over_the_redis_layer():
    """A page left open with nothing happening still gets the next update (no drop, no re-read)."""
    user = make_user("viewer", operator=False)

    async def follow():
        communicator = WebsocketCommunicator(consumers.SweepUpdatesConsumer.as_asgi(), "/ws/sweeps/8/")
        communicator.scope["user"] = user
        communicator.scope["url_route"] = {"args": (), "kwargs": {"sweep_id": 8}}
        connected, _ = await communicator.connect()
        assert connected
        assert (await communicator.receive_json_from())["type"] == "hello"
        # Idle longer than the layer's blocking read, which a socket timeout of the same length used to cut.
        await asyncio.sleep(RedisChannelLayer.brpop_timeout + 2)
        await get_channel_layer().group_send(
            "sweep.8",
            {
                "type": "sweep.update",
                "sweep": 8,
                "status": "running",
                "verdict": "unknown",
                "progress": {},
                "pairs": [{"a": "n0", "b": "n1", "status": "ok"}],
            },
        )
        frame = await communicator.receive_json_from(timeout=timing.FRAME_S)
        await communicator.disconnect()
        return frame

    assert "RedisChannelLayer" in get_channel_layer().__class__.__name__
    frame = async_to_sync(follow)()
    assert frame["type"] == "update" and frame["pairs"] == [{"a": "n0", "b": "n1", "status": "ok"}]


class _ArrivesWhileSending(consumers.SweepUpdatesConsumer):
    """An update handled while the first frame is being sent, as happens under a steady stream."""

    late = {
        "type": "sweep.update",
        "sweep": 9,
        "status": "running",
        "verdict": "unknown",
        "progress": {},
        "pairs": [{"a": "n0", "b": "n2", "status": "ok"}],
    }

    async def send_json(self, content, close=False):
        await super().send_json(content, close)
        if content.get("type") == "update" and not getattr(self, "sent_late", False):
            self.sent_late = True
            await self.sweep_update(self.late)


@pytest.mark.timeout(30)
def test_it_sends_what_arrived_while_a_frame_was_being_sent():
    user = make_user("viewer", operator=False)

    async def follow():
        communicator = WebsocketCommunicator(_ArrivesWhileSending.as_asgi(), "/ws/sweeps/9/")
        communicator.scope["user"] = user
        communicator.scope["url_route"] = {"args": (), "kwargs": {"sweep_id": 9}}
        connected, _ = await communicator.connect()
        assert connected
        await communicator.receive_json_from()  # hello
        await get_channel_layer().group_send(
            "sweep.9",
            {
                "type": "sweep.update",
                "sweep": 9,
                "status": "running",
                "verdict": "unknown",
                "progress": {},
                "pairs": [{"a": "n0", "b": "n1", "status": "ok"}],
            },
        )
        frames = [
            await communicator.receive_json_from(timeout=timing.FRAME_S),
            await communicator.receive_json_from(timeout=timing.FRAME_S),
        ]
        await communicator.disconnect()
        return frames

    first, second = async_to_sync(follow)()
    assert first["pairs"] == [{"a": "n0", "b": "n1", "status": "ok"}]
    assert second["pairs"] == [{"a": "n0", "b": "n2", "status": "ok"}]  # not left behind
