"""/metrics: Prometheus text exposition through prometheus_client.

A custom collector reads the database at scrape time: agents online and
registered, sweeps by status, the time of the last successful sweep, rejected
agent messages, and the latest finished sweep's identity, per-pair status and
busbw and probe durations. It is registered on a private registry (no process
or platform metrics, nothing kept between scrapes). When
CLUSTER_HEALTH_METRICS_TOKEN is set, scrapers must send it as a bearer token.
"""

from __future__ import annotations

import hmac
from collections.abc import Iterator
from datetime import datetime

from django.conf import settings
from django.db.models import Count, Max
from django.http import HttpResponse
from django.utils import timezone
from django.views.decorators.http import require_GET
from prometheus_client import CONTENT_TYPE_PLAIN_0_0_4, CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from cluster_health.ingest import rejects
from cluster_health.models import Node, PairProbe, RejectedMessage, Sweep
from cluster_health.shapes.pairs import STATUS_CODES

# Bucket bounds as the `le` label values are written (le="1", not the "1.0" of the
# library's own Histogram), so the series keep the names they have always had.
DURATION_BUCKETS = ("1", "2", "5", "10", "20", "30", "60", "120", "300")
# The text format generate_latest writes, as the library's own handlers label it when
# the scraper asks for nothing else (CONTENT_TYPE_LATEST is the 1.0.0 text format,
# which they send only with the escaping scheme that was negotiated).
CONTENT_TYPE = CONTENT_TYPE_PLAIN_0_0_4

PairRow = tuple[str, str, str, float | None, float | None]  # a, b, status, busbw, duration


def _agents(now: datetime) -> Iterator[Metric]:
    """Agents online (recent heartbeat) and ever registered."""
    online = Node.objects.filter(Node.online_q(now)).count()
    yield GaugeMetricFamily("cluster_health_agents_online", "Agents with a recent heartbeat.", value=online)
    yield GaugeMetricFamily("cluster_health_agents_registered", "Agents ever registered.", value=Node.objects.count())


def _sweeps_by_status() -> Iterator[Metric]:
    """Sweep counts, one series per sweep status (zero for a status no sweep has)."""
    family = GaugeMetricFamily("cluster_health_sweeps", "Sweeps by status.", labels=["status"])
    by_status = dict(Sweep.objects.values("status").annotate(n=Count("id")).values_list("status", "n"))
    for status, _ in Sweep.STATUS_CHOICES:
        family.add_metric([status], by_status.get(status, 0))
    yield family


def _last_successful_sweep() -> Iterator[Metric]:
    """Finish time of the last passing (or warning) sweep of each kind."""
    family = GaugeMetricFamily(
        "cluster_health_last_successful_sweep_timestamp_seconds",
        "Finish time of the last sweep with verdict pass or warn, by kind.",
        labels=["kind"],
    )
    last_ok = (
        Sweep.objects.filter(status="finished", verdict__in=("pass", "warn")).values("kind").annotate(t=Max("finished"))
    )
    for row in last_ok:
        family.add_metric([row["kind"]], round(row["t"].timestamp(), 3))
    yield family


def _rejected_messages() -> Iterator[Metric]:
    """Agent messages kept as rejected (a gauge: the rows can be deleted), and every one counted."""
    yield GaugeMetricFamily(
        "cluster_health_rejected_messages", "Agent messages kept as rejected.", value=RejectedMessage.objects.count()
    )
    counted = rejects.counts()
    if counted is None:
        return
    total, unkept = counted
    yield CounterMetricFamily(
        "cluster_health_rejected_messages_counted", "Agent messages rejected, kept or not.", value=total
    )
    yield CounterMetricFamily(
        "cluster_health_rejected_messages_unkept",
        "Rejected agent messages past the per-minute budget: counted, not kept.",
        value=unkept,
    )
    dropped = rejects.dropped_counts() or {}
    family = CounterMetricFamily(
        "cluster_health_ingest_dropped",
        "Messages dropped from a node's ingest list past its cap (a node sending far more than its agent does).",
        labels=["node"],
    )
    for node, count in sorted(dropped.items()):
        family.add_metric([node], count)
    yield family


def _pair_status(rows: list[PairRow]) -> Metric:
    """Each pair's status code in the latest sweep."""
    family = GaugeMetricFamily(
        "cluster_health_pair_status",
        "Pair status code in the latest sweep: " + ", ".join(f"{i}={s}" for s, i in STATUS_CODES.items()),
        labels=["a", "b", "status"],
    )
    for a, b, status, _, _ in rows:
        family.add_metric([a, b, status], STATUS_CODES[status])
    return family


def _pair_busbw(rows: list[PairRow]) -> Metric:
    """Each measured pair's busbw in the latest sweep, to 6 significant digits."""
    family = GaugeMetricFamily(
        "cluster_health_pair_busbw_gbps", "Pair all_reduce busbw at the largest size (GB/s).", labels=["a", "b"]
    )
    for a, b, _, bw, _ in rows:
        if bw is not None:
            family.add_metric([a, b], float(f"{bw:.6g}"))
    return family


def _probe_durations(rows: list[PairRow]) -> Metric:
    """Histogram of the latest sweep's pair probe wall times (bucket bounds written as integers)."""
    durations = [d for *_, d in rows if d is not None]
    buckets = [(le, sum(1 for d in durations if d <= float(le))) for le in DURATION_BUCKETS]
    return HistogramMetricFamily(
        "cluster_health_probe_duration_seconds",
        "Wall time of the latest sweep's pair probes.",
        buckets=[*buckets, ("+Inf", len(durations))],
        sum_value=round(sum(durations), 3),
    )


def _latest_sweep() -> Iterator[Metric]:
    """The latest finished sweep's identity and its per-pair families; nothing before the first one."""
    latest = Sweep.objects.filter(status="finished").exclude(kind="preflight").order_by("-finished").first()
    if latest is None:
        return
    info = GaugeMetricFamily(
        "cluster_health_latest_sweep_info", "The sweep the pair metrics come from.", labels=["sweep", "kind", "verdict"]
    )
    info.add_metric([str(latest.pk), latest.kind, str(latest.verdict)], 1)
    yield info
    rows: list[PairRow] = list(
        PairProbe.objects.filter(sweep=latest).values_list(
            "node_a__name", "node_b__name", "status", "busbw_gbps", "duration_s"
        )
    )
    yield _pair_status(rows)
    yield _pair_busbw(rows)
    yield _probe_durations(rows)


class ClusterHealthCollector(Collector):
    """Every family, read from the database when a scrape collects them."""

    def collect(self) -> Iterator[Metric]:
        yield from _agents(timezone.now())
        yield from _sweeps_by_status()
        yield from _last_successful_sweep()
        yield from _rejected_messages()
        yield from _latest_sweep()


REGISTRY = CollectorRegistry()
REGISTRY.register(ClusterHealthCollector())  # no describe(): registering reads nothing


def render() -> bytes:
    """The whole exposition: agents, sweeps, rejected messages, then the latest sweep's pairs."""
    return generate_latest(REGISTRY)


@require_GET
def metrics(request):
    token = settings.METRICS_TOKEN
    if token:
        sent = request.headers.get("Authorization", "")
        if not hmac.compare_digest(sent.encode(), f"Bearer {token}".encode()):
            return HttpResponse(
                "metrics need Authorization: Bearer <CLUSTER_HEALTH_METRICS_TOKEN>\n",
                status=401,
                content_type="text/plain",
            )
    return HttpResponse(render(), content_type=CONTENT_TYPE)
