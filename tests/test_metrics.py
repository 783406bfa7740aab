"""/metrics: Prometheus text with pair busbw and status, last success, agents online, durations."""

import pytest

from devtools.sweep_driver import Driver, heartbeat, result_for

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("memory_channel_layer")]


def test_it_exports_the_latest_sweep(client, django_capture_on_commit_callbacks):
    driver = Driver(django_capture_on_commit_callbacks)
    heartbeat("n0"), heartbeat("n1")
    driver.sweep(kind="pairs", pairs=[["n0", "n1"]], sizes=[1024])
    driver.answer_all(lambda c: result_for(c, busbw=4.5))
    body = client.get("/metrics").content.decode()
    for sample in (
        "cluster_health_agents_online 2",
        'cluster_health_pair_busbw_gbps{a="n0",b="n1"} 4.5',
        'cluster_health_pair_status{a="n0",b="n1",status="ok"} 2',
        'cluster_health_last_successful_sweep_timestamp_seconds{kind="pairs"}',
        "cluster_health_probe_duration_seconds_count 1",
        "# TYPE cluster_health_probe_duration_seconds histogram",
    ):
        assert sample in body


def test_it_requires_the_token_when_one_is_set(client, settings):
    settings.METRICS_TOKEN = "s3cret"
    assert client.get("/metrics").status_code == 401
    assert client.get("/metrics", HTTP_AUTHORIZATION="Bearer s3cret").status_code == 200
