"""/metrics: pair busbw and status, last success, agents online, rejected messages, durations.

Every test scrapes through the Django test client and reads the body with
prometheus_client's own parser, as a scraper would.
"""

from datetime import timedelta

import pytest
from django.utils import timezone
from prometheus_client.parser import text_string_to_metric_families

from cluster_health.models import Node, Sweep
from devtools.sweep_driver import heartbeat, result_for

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("memory_channel_layer")]

# Every family the exposition has had (the alerting rules in deploy/prometheus use
# several): its type and label names. The last four appear once a sweep has finished.
FAMILIES = {
    "cluster_health_agents_online": ("gauge", ()),
    "cluster_health_agents_registered": ("gauge", ()),
    "cluster_health_sweeps": ("gauge", ("status",)),
    "cluster_health_last_successful_sweep_timestamp_seconds": ("gauge", ("kind",)),
    "cluster_health_rejected_messages": ("gauge", ()),
    "cluster_health_latest_sweep_info": ("gauge", ("kind", "sweep", "verdict")),
    "cluster_health_pair_status": ("gauge", ("a", "b", "status")),
    "cluster_health_pair_busbw_gbps": ("gauge", ("a", "b")),
    "cluster_health_probe_duration_seconds": ("histogram", ()),
    # Every rejected message counted, and those past the per-minute budget (not kept); from Redis.
    "cluster_health_rejected_messages_counted": ("counter", ()),
    "cluster_health_rejected_messages_unkept": ("counter", ()),
    # Messages dropped from a node's ingest list past its cap, per node; from Redis.
    "cluster_health_ingest_dropped": ("counter", ("node",)),
}
LATEST_SWEEP_FAMILIES = {
    "cluster_health_latest_sweep_info",
    "cluster_health_pair_status",
    "cluster_health_pair_busbw_gbps",
    "cluster_health_probe_duration_seconds",
}
# Sample names, the histogram's three series and the counters' _total included.
COUNTERS = {
    "cluster_health_rejected_messages_counted",
    "cluster_health_rejected_messages_unkept",
    "cluster_health_ingest_dropped",
}
SAMPLE_NAMES = (
    (set(FAMILIES) - {"cluster_health_probe_duration_seconds"} - COUNTERS)
    | {f"{c}_total" for c in COUNTERS}
    | {
        "cluster_health_probe_duration_seconds_bucket",
        "cluster_health_probe_duration_seconds_sum",
        "cluster_health_probe_duration_seconds_count",
    }
)
DURATION_BOUNDS = ["1", "2", "5", "10", "20", "30", "60", "120", "300", "+Inf"]


def scrape(client, **headers):
    """The parsed exposition: family name -> family."""
    response = client.get("/metrics", **headers)
    assert response.status_code == 200
    assert response["Content-Type"] == "text/plain; version=0.0.4; charset=utf-8"
    return {f.name: f for f in text_string_to_metric_families(response.content.decode())}


def samples(families, name, sample_name=None):
    """{labels as a sorted tuple: value} of one family's samples named sample_name (default: the family's name)."""
    return {tuple(sorted(s.labels.items())): s.value for s in families[name].samples if s.name == (sample_name or name)}


def value(families, name, sample_name=None, **labels):
    return samples(families, name, sample_name)[tuple(sorted(labels.items()))]


def test_it_exports_the_latest_sweep(client, driver):
    heartbeat("n0"), heartbeat("n1")
    sweep = driver.sweep(kind="pairs", pairs=[["n0", "n1"]], sizes=[1024])
    driver.answer_all(lambda c: result_for(c, busbw=4.5))
    sweep.refresh_from_db()
    families = scrape(client)
    assert value(families, "cluster_health_agents_online") == 2
    assert samples(families, "cluster_health_pair_busbw_gbps") == {(("a", "n0"), ("b", "n1")): 4.5}
    assert samples(families, "cluster_health_pair_status") == {(("a", "n0"), ("b", "n1"), ("status", "ok")): 2}
    assert value(families, "cluster_health_last_successful_sweep_timestamp_seconds", kind="pairs") == pytest.approx(
        sweep.finished.timestamp(), abs=0.001
    )
    assert value(families, "cluster_health_latest_sweep_info", sweep=str(sweep.pk), kind="pairs", verdict="pass") == 1
    histogram = families["cluster_health_probe_duration_seconds"]
    assert histogram.type == "histogram"
    assert value(families, histogram.name, "cluster_health_probe_duration_seconds_count") == 1
    assert value(families, histogram.name, "cluster_health_probe_duration_seconds_sum") == 0.5  # result_for's wall time
    buckets = samples(families, histogram.name, "cluster_health_probe_duration_seconds_bucket")
    assert [dict(k)["le"] for k in buckets] == DURATION_BOUNDS
    assert set(buckets.values()) == {1}


def test_it_counts_what_an_operator_alerts_on(client, driver):
    """Agents online against registered, each pair's status, only measured pairs' busbw, rejected messages."""
    for name in ("n0", "n1", "n2", "n3"):
        heartbeat(name)
    driver.sweep(kind="pairs", pairs=[["n0", "n1"]], sizes=[1024])
    driver.answer_all(lambda c: result_for(c, busbw=3.25))
    latest = driver.sweep(kind="pairs", pairs=[["n0", "n1"], ["n0", "n2"], ["n1", "n2"]], sizes=[1024])
    driver.answer_all(
        lambda c: result_for(c, status="failed", reason="refused") if c["node"] == "n2" else result_for(c, busbw=4.5)
    )
    Node.objects.filter(name="n3").update(last_heartbeat=timezone.now() - timedelta(days=1))
    assert driver.ingest("not even an object") == "rejected"
    assert driver.ingest({"v": 1, "kind": "pair"}) == "rejected"

    families = scrape(client)
    assert value(families, "cluster_health_agents_online") == 3
    assert value(families, "cluster_health_agents_registered") == 4
    assert value(families, "cluster_health_rejected_messages") == 2
    assert samples(families, "cluster_health_sweeps") == {
        (("status", "pending"),): 0,
        (("status", "running"),): 0,
        (("status", "finished"),): 2,
        (("status", "failed"),): 0,
        (("status", "cancelled"),): 0,
    }
    assert value(families, "cluster_health_latest_sweep_info", sweep=str(latest.pk), kind="pairs", verdict="fail") == 1
    assert samples(families, "cluster_health_pair_status") == {
        (("a", "n0"), ("b", "n1"), ("status", "ok")): 2,
        (("a", "n0"), ("b", "n2"), ("status", "failed")): 4,
        (("a", "n1"), ("b", "n2"), ("status", "failed")): 4,
    }
    assert samples(families, "cluster_health_pair_busbw_gbps") == {(("a", "n0"), ("b", "n1")): 4.5}
    # the first sweep passed and is the last successful one; the failed latest one is not
    first = Sweep.objects.exclude(pk=latest.pk).get()
    assert samples(families, "cluster_health_last_successful_sweep_timestamp_seconds") == {
        (("kind", "pairs"),): pytest.approx(first.finished.timestamp(), abs=0.001)
    }
    assert value(families, "cluster_health_probe_duration_seconds", "cluster_health_probe_duration_seconds_count") == 3


def test_every_family_parses_with_its_name_type_and_labels(client, driver):
    heartbeat("n0"), heartbeat("n1")
    driver.sweep(kind="pairs", pairs=[["n0", "n1"]], sizes=[1024])
    driver.answer_all(lambda c: result_for(c, busbw=4.5))
    from cluster_health import shared_redis
    from cluster_health.queues import keys

    shared_redis.client().hset(keys.DROPPED, "n1", 3)  # what the ingest consumer counts for a node over its cap
    families = scrape(client)
    assert set(families) == set(FAMILIES)
    assert value(families, "cluster_health_ingest_dropped", "cluster_health_ingest_dropped_total", node="n1") == 3
    for name, (kind, label_names) in FAMILIES.items():
        family = families[name]
        assert family.type == kind, name
        assert family.documentation, name
        for sample in family.samples:
            assert set(sample.labels) - {"le"} == set(label_names), sample
    assert {s.name for f in families.values() for s in f.samples} == SAMPLE_NAMES


def test_before_any_sweep_it_has_no_latest_sweep_families(client):
    families = scrape(client)
    assert set(families) == set(FAMILIES) - LATEST_SWEEP_FAMILIES
    assert value(families, "cluster_health_agents_online") == 0
    assert set(samples(families, "cluster_health_sweeps").values()) == {0}
    assert samples(families, "cluster_health_last_successful_sweep_timestamp_seconds") == {}


def test_it_requires_the_token_when_one_is_set(client, settings):
    settings.METRICS_TOKEN = "s3cret"
    assert client.get("/metrics").status_code == 401
    assert client.get("/metrics", HTTP_AUTHORIZATION="Bearer wrong").status_code == 401
    assert b"cluster_health_" not in client.get("/metrics").content
    assert "cluster_health_agents_online" in scrape(client, HTTP_AUTHORIZATION="Bearer s3cret")


def test_it_only_answers_get(client):
    assert client.post("/metrics").status_code == 405
