"""Web edges: numeric query parameters, WebSocket frames, CSV cells."""

from __future__ import annotations

import pytest
from asgiref.sync import async_to_sync
from channels.testing import WebsocketCommunicator

from cluster_health.shapes import documents
from cluster_health.web import consumers
from devtools.sweep_driver import heartbeat, result_for
from tests.support.dashboard_rows import make_user


@pytest.mark.usefixtures("memory_channel_layer")
@pytest.mark.parametrize(
    "url",
    [
        "/sweeps/compare/?a=%C2%B2&b={pk}",
        "/sweeps/compare/?a={pk}&b=99999999999999999999",
        "/sweeps/compare.json?a=%C2%B2&b={pk}",
        "/sweeps/{pk}/report/?before=%C2%B2",
        "/sweeps/{pk}/report/?before=-1",
    ],
)
def test_a_number_parameter_that_is_not_a_number_is_a_400(viewer_client, driver, url):
    heartbeat("n0"), heartbeat("n1")
    sweep = driver.sweep(kind="connectivity")
    driver.answer_all()
    assert viewer_client.get(url.format(pk=sweep.pk)).status_code == 400


@pytest.mark.django_db(transaction=True)
def test_the_websocket_ignores_frames_that_are_not_json_objects():
    user = make_user("viewer", operator=False)

    async def talk():
        communicator = WebsocketCommunicator(consumers.SweepUpdatesConsumer.as_asgi(), "/ws/sweeps/7/")
        communicator.scope["user"] = user
        communicator.scope["url_route"] = {"args": (), "kwargs": {"sweep_id": 7}}
        connected, _ = await communicator.connect()
        assert connected
        await communicator.receive_json_from()
        for frame in ("not json", "[1, 2]", "42", "null", '"ping"'):
            await communicator.send_to(text_data=frame)
        await communicator.send_to(bytes_data=b"\x00\x01")
        await communicator.send_json_to({"type": "ping"})
        reply = await communicator.receive_json_from(timeout=3)
        await communicator.disconnect()
        return reply

    assert async_to_sync(talk)() == {"type": "pong"}


@pytest.mark.parametrize("hint", ['=HYPERLINK("http://x")', "+1+1", "-2+3", "@SUM(A1)", "\t=1", "\r=1"])
def test_csv_cells_cannot_start_a_formula(hint):
    assert documents.csv_text(hint).startswith("'")
    assert documents.csv_text("store_timeout after 5s") == "store_timeout after 5s"


@pytest.mark.django_db
@pytest.mark.usefixtures("memory_channel_layer")
def test_the_pairs_csv_escapes_agent_hints(viewer_client, driver):
    heartbeat("n0"), heartbeat("n1")
    sweep = driver.sweep(kind="connectivity")
    driver.answer_all(lambda c: result_for(c, status="failed", reason="refused", hint="=cmd|' /C calc'!A0"))
    body = b"".join(viewer_client.get(f"/api/sweeps/{sweep.pk}/pairs.csv").streaming_content).decode()
    assert ",'=cmd|" in body and ",=cmd" not in body


def test_a_viewers_expensive_requests_are_bounded_per_minute(viewer_client, settings):
    """The CSV of a whole sweep, a report, a diff, the consistency table: a budget per user a minute,
    then 429 saying when to come back, so one viewer's script cannot load the server for everyone."""
    from django.core.cache import cache

    from cluster_health.models import Sweep

    settings.HEAVY_REQUESTS_PER_MINUTE = 3
    cache.clear()  # this process's cache (tests.settings): earlier tests' requests counted too
    sweep = Sweep.objects.create(kind="connectivity", nodes=[], status="finished", verdict="pass")
    urls = [f"/api/sweeps/{sweep.pk}/pairs.csv", f"/sweeps/{sweep.pk}/report/", "/nodes/versions"] * 3
    answers = [viewer_client.get(url) for url in urls]
    codes = [a.status_code for a in answers]
    assert codes[:3] == [200, 200, 200] and 429 in codes, codes
    # Three a minute (six if the minute turned between two requests), then refused until it renews.
    assert 3 <= codes.index(429) <= 6, codes
    refused = answers[codes.index(429)]
    assert 0 < int(refused["Retry-After"]) <= 60 and b"at most 3 a minute" in refused.content
    assert viewer_client.get(f"/sweeps/{sweep.pk}/").status_code == 200  # ordinary pages are not counted


def test_the_consistency_table_is_built_once_for_every_viewer_within_its_time(
    viewer_client, settings, django_assert_max_num_queries
):
    from django.core.cache import cache

    from cluster_health.models import Node

    settings.CONSISTENCY_CACHE_S = 30.0
    cache.delete("cluster-health:consistency-table")
    Node.objects.create(name="c0", address="10.0.0.1", facts={"versions": {"torch": "2.5.1"}})
    assert b"2.5.1" in viewer_client.get("/nodes/versions").content
    Node.objects.filter(name="c0").update(facts={"versions": {"torch": "9.9.9"}})
    assert b"9.9.9" not in viewer_client.get("/nodes/versions").content  # the table of 30 s ago
    cache.delete("cluster-health:consistency-table")
    assert b"9.9.9" in viewer_client.get("/nodes/versions").content
