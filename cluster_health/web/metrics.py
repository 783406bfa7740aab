"""/metrics: Prometheus text exposition, written by hand (no client library needed).

Per-pair busbw and status of the latest finished sweep, the time of the last
successful sweep, agents online, and probe durations. When
CLUSTER_HEALTH_METRICS_TOKEN is set, scrapers must send it as a bearer token.
"""

from __future__ import annotations

import hmac
from datetime import datetime

from django.conf import settings
from django.db.models import Count, Max
from django.http import HttpResponse
from django.utils import timezone
from django.views.decorators.http import require_GET

from cluster_health.models import Node, PairProbe, RejectedMessage, Sweep
from cluster_health.shapes.pairs import STATUS_CODES

DURATION_BUCKETS = (1, 2, 5, 10, 20, 30, 60, 120, 300)
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


def _label(value) -> str:
    return str(value).replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _labels(**kw) -> str:
    return "{" + ",".join(f'{k}="{_label(v)}"' for k, v in kw.items()) + "}"


def _family(lines, name, kind, help_text):
    lines.append(f"# HELP {name} {help_text}")
    lines.append(f"# TYPE {name} {kind}")


def _agents(lines: list[str], now: datetime) -> None:
    """Agents online (recent heartbeat) and ever registered."""
    online = Node.objects.filter(Node.online_q(now)).count()
    _family(lines, "cluster_health_agents_online", "gauge", "Agents with a recent heartbeat.")
    lines.append(f"cluster_health_agents_online {online}")
    _family(lines, "cluster_health_agents_registered", "gauge", "Agents ever registered.")
    lines.append(f"cluster_health_agents_registered {Node.objects.count()}")


def _sweeps_by_status(lines: list[str]) -> None:
    """Sweep counts, one series per sweep status."""
    _family(lines, "cluster_health_sweeps", "gauge", "Sweeps by status.")
    by_status = dict(Sweep.objects.values("status").annotate(n=Count("id")).values_list("status", "n"))
    for status, _ in Sweep.STATUS_CHOICES:
        lines.append(f"cluster_health_sweeps{_labels(status=status)} {by_status.get(status, 0)}")


def _last_successful_sweep(lines: list[str]) -> None:
    """Finish time of the last passing (or warning) sweep of each kind."""
    _family(
        lines,
        "cluster_health_last_successful_sweep_timestamp_seconds",
        "gauge",
        "Finish time of the last sweep with verdict pass or warn, by kind.",
    )
    last_ok = (
        Sweep.objects.filter(status="finished", verdict__in=("pass", "warn")).values("kind").annotate(t=Max("finished"))
    )
    for row in last_ok:
        lines.append(
            f"cluster_health_last_successful_sweep_timestamp_seconds{_labels(kind=row['kind'])} "
            f"{row['t'].timestamp():.3f}"
        )


def _rejected_messages(lines: list[str]) -> None:
    """Agent messages kept as rejected."""
    _family(lines, "cluster_health_rejected_messages", "gauge", "Agent messages kept as rejected.")
    lines.append(f"cluster_health_rejected_messages {RejectedMessage.objects.count()}")


def _pair_status(lines: list[str], rows: list[tuple]) -> None:
    """Each pair's status code in the latest sweep."""
    _family(
        lines,
        "cluster_health_pair_status",
        "gauge",
        "Pair status code in the latest sweep: " + ", ".join(f"{i}={s}" for s, i in STATUS_CODES.items()),
    )
    for a, b, status, _, _ in rows:
        lines.append(f"cluster_health_pair_status{_labels(a=a, b=b, status=status)} {STATUS_CODES[status]}")


def _pair_busbw(lines: list[str], rows: list[tuple]) -> None:
    """Each measured pair's busbw in the latest sweep."""
    _family(lines, "cluster_health_pair_busbw_gbps", "gauge", "Pair all_reduce busbw at the largest size (GB/s).")
    for a, b, _, bw, _ in rows:
        if bw is not None:
            lines.append(f"cluster_health_pair_busbw_gbps{_labels(a=a, b=b)} {bw:.6g}")


def _probe_durations(lines: list[str], rows: list[tuple]) -> None:
    """Histogram of the latest sweep's pair probe wall times."""
    durations = sorted(d for *_, d in rows if d is not None)
    _family(lines, "cluster_health_probe_duration_seconds", "histogram", "Wall time of the latest sweep's pair probes.")
    for le in DURATION_BUCKETS:
        n = sum(1 for d in durations if d <= le)
        lines.append(f'cluster_health_probe_duration_seconds_bucket{{le="{le}"}} {n}')
    lines.append(f'cluster_health_probe_duration_seconds_bucket{{le="+Inf"}} {len(durations)}')
    lines.append(f"cluster_health_probe_duration_seconds_sum {sum(durations):.3f}")
    lines.append(f"cluster_health_probe_duration_seconds_count {len(durations)}")


def _latest_sweep(lines: list[str]) -> None:
    """The latest finished sweep's identity and its per-pair families, if there is one."""
    latest = Sweep.objects.filter(status="finished").exclude(kind="preflight").order_by("-finished").first()
    if latest is None:
        return
    _family(lines, "cluster_health_latest_sweep_info", "gauge", "The sweep the pair metrics come from.")
    lines.append(
        f"cluster_health_latest_sweep_info{_labels(sweep=latest.pk, kind=latest.kind, verdict=latest.verdict)} 1"
    )
    rows = list(
        PairProbe.objects.filter(sweep=latest).values_list(
            "node_a__name", "node_b__name", "status", "busbw_gbps", "duration_s"
        )
    )
    _pair_status(lines, rows)
    _pair_busbw(lines, rows)
    _probe_durations(lines, rows)


def render(now=None) -> str:
    """The whole exposition: agents, sweeps, rejected messages, then the latest sweep's pairs."""
    now = now or timezone.now()
    lines: list[str] = []
    _agents(lines, now)
    _sweeps_by_status(lines)
    _last_successful_sweep(lines)
    _rejected_messages(lines)
    _latest_sweep(lines)
    return "\n".join(lines) + "\n"


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
