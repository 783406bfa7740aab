"""The live-update WebSocket: anonymous handshakes are refused; updates reach a browser batched."""

import pytest
from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from channels.testing import WebsocketCommunicator

from cluster_health import consumers
from cluster_health.asgi import application
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
            await layer.group_send("sweep.7", {
                "type": "sweep.update", "sweep": 7, "status": "running", "verdict": "unknown",
                "progress": {"pairs_done": i + 1, "pairs_total": 20},
                "pairs": [{"a": "n0", "b": f"n{i + 1}", "status": "ok", "busbw_gbps": 1.0}],
            })
        frame = await communicator.receive_json_from(timeout=3)
        await communicator.disconnect()
        return frame

    frame = async_to_sync(follow)()
    assert frame["type"] == "update" and frame["sweep"] == 7
    assert len(frame["pairs"]) == 20
    assert frame["progress"]["pairs_done"] == 20
