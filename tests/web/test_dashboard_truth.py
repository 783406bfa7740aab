"""What the Nodes, node, pair, compare, report and schedules pages say, and who may change what."""

import json
import re

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse
from django_celery_beat.models import PeriodicTask

from cluster_health import defaults, vocabulary
from cluster_health.models import Node, PairProbe, Sweep
from tests.support.dashboard_rows import make_nodes, make_sweep, make_user

pytestmark = pytest.mark.django_db

TIMEOUT = {"status": "timeout", "stage": "connect", "reason": "connect_timeout", "busbw_gbps": None}


@pytest.fixture
def viewer(client):
    client.force_login(make_user("viewer", operator=False))
    return client


@pytest.fixture
def operator():
    client = Client(enforce_csrf_checks=True)
    client.force_login(make_user("op", operator=True))
    return client


def csrf_post(client, url, data):
    """A POST as the browser sends it: with the token the page's form carries."""
    page = client.get(reverse("nodes"))
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.content.decode()).group(1)
    return client.post(url, {**data, "csrfmiddlewaretoken": token})


def test_the_nodes_page_shows_each_nodes_health_problems_first(viewer):
    nodes = make_nodes(["n1", "n2", "n3"])
    Node.objects.filter(name="n2").update(topology_group="rack-b")
    make_sweep(nodes, {("n1", "n3"): TIMEOUT}, verdict="fail", findings=[("fail", "n1<->n3", "blocked")])
    html = viewer.get(reverse("nodes")).content.decode()
    rows = re.findall(r'<tr data-node="(\w+)"[^>]*data-result="(\w+)"', html)
    assert rows == [("n1", "failing"), ("n3", "failing"), ("n2", "ok")]
    n1 = html[html.index('data-node="n1"') : html.index('data-node="n3"')]
    assert 'href="/pairs/n1/n3/"' in n1 and "blocked" in n1 and "failing since" in n1
    assert "rack-b" in html and 'id="consistency"' not in html  # the version table is its own tab
    assert 'data-retire="n1"' not in html  # a viewer is offered no Retire


def test_a_viewer_cannot_retire_a_node(viewer):
    make_nodes(["v1"])
    response = viewer.post(reverse("node-activity", args=["v1"]), {"action": "retire"})
    assert response.status_code == 403 and Node.objects.get(name="v1").active


def test_retiring_needs_the_csrf_token(operator):
    make_nodes(["c1"])
    response = operator.post(reverse("node-activity", args=["c1"]), {"action": "retire"})
    assert response.status_code == 403 and Node.objects.get(name="c1").active


def test_an_operator_retires_and_activates_a_node_from_the_nodes_page(operator):
    make_nodes(["r1", "r2"])
    assert 'data-retire="r1"' in operator.get(reverse("nodes")).content.decode()
    response = csrf_post(operator, reverse("node-activity", args=["r1"]), {"action": "retire", "next": "/nodes/"})
    assert response.status_code == 302 and response["Location"] == "/nodes/"
    node = Node.objects.get(name="r1")
    assert not node.active and node.retired_at is not None  # as `manage.py nodes retire r1` leaves it
    assert 'data-retired-node="r1"' in operator.get(reverse("nodes")).content.decode()
    csrf_post(operator, reverse("node-activity", args=["r1"]), {"action": "activate", "next": "https://evil.example/"})
    assert Node.objects.get(name="r1").active
    assert csrf_post(operator, reverse("node-activity", args=["r1"]), {"action": "delete"}).status_code == 400


def test_a_node_page_shows_its_slow_peers_and_their_bandwidth(viewer):
    nodes = make_nodes(
        ["s1", "s2", "s3"], facts={"s1": {"versions": {"torch": "2.5.1"}, "env": {"NCCL_DEBUG": "WARN"}}}
    )
    make_sweep(
        nodes,
        {("s1", "s2"): {"status": "degraded", "reason": "below_baseline", "busbw_gbps": 0.024}},
        verdict="warn",
        findings=[("warn", "s1", "s1 is slow")],
    )
    html = viewer.get(reverse("node", args=["s1"])).content.decode()
    assert 'data-node-health="degraded"' in html and "s1 is slow" in html
    table = html[html.index('id="peer-bandwidth"') :]
    assert re.search(r'data-peer="s2" data-status="degraded".*?0\.024', table, re.S)
    assert re.search(r'data-peer="s3" data-status="ok".*?2\.000', table, re.S)
    assert '<dt title="versions.torch">torch</dt>' in html and "NCCL_DEBUG" in html and "as of <time" in html
    assert "minutes ago" not in html and re.search(r"last heartbeat <span data-heartbeat><time [^>]*data-ago", html)


def test_the_pair_page_words_units_bytes_and_retransmissions_truly(viewer):
    nodes = make_nodes(["p1", "p2"])
    sweep = make_sweep(nodes, {("p1", "p2"): TIMEOUT}, verdict="fail")
    tcp = {"OutSegs": 1, "RetransSegs": 2, "retrans_pct": 200.0, "OutRsts": 0, "InErrs": 0}
    PairProbe.objects.filter(sweep=sweep).update(
        half_a={"status": "timeout", "evidence": {"store": {"role": "listen", "address": "198.18.0.1:37481"}}},
        half_b={
            "status": "timeout",
            "evidence": {"store": {"role": "connect", "address": "198.18.0.1:37481", "connected": False}, "tcp": tcp},
        },
    )
    html = viewer.get(reverse("pair", args=["p1", "p2"])).content.decode()
    assert "none bytes" not in html and "no message size completed" in html
    assert "could not connect to 198.18.0.1:37481" in html and "not connected" not in html
    assert "3 segments sent: 1 new, 2 retransmissions (66.7 % of the segments sent)" in html and "200" not in html
    assert "latency (µs)" in html
    trend = json.loads(re.search(r'id="trend-data"[^>]*>(.*?)</script>', html, re.S).group(1))
    assert [(p["status"], p["failed"]) for p in trend] == [("timeout", True)]


def test_compare_defaults_to_the_latest_two_sweeps_and_lists_every_changed_pair(viewer):
    nodes = make_nodes(["c1", "c2", "c3"])
    make_sweep(nodes)
    before = make_sweep(nodes, {("c1", "c2"): TIMEOUT, ("c2", "c3"): {"status": "degraded", "busbw_gbps": 0.5}})
    after = make_sweep(nodes, {("c1", "c3"): {"status": "degraded", "busbw_gbps": 0.5}})
    html = viewer.get(reverse("compare")).content.decode()
    assert f"?a={before.pk}&amp;b={after.pk}" in html or f"?a={before.pk}&b={after.pk}" in html
    fixed = html[html.index("data-fixed") : html.index("data-transient")]
    assert "c1 ↔ c2" in fixed and "c2 ↔ c3" in fixed  # a failure and a slow pair recovered
    regressed = html[html.index("data-regressed") : html.index("data-fixed")]
    assert "c1 ↔ c3</a>: ok → <b>degraded" in regressed  # a regression, not "changed otherwise"
    same = viewer.get(reverse("compare"), {"a": after.pk, "b": after.pk}).content.decode()
    assert "data-same-sweep" in same and "plot-change" not in same


def test_the_report_opens_with_go_or_no_go_and_counts_every_status(viewer):
    nodes = make_nodes(["g1", "g2", "g3"])
    before = make_sweep(nodes)
    after = make_sweep(nodes, {("g1", "g2"): TIMEOUT}, verdict="fail")
    html = viewer.get(reverse("sweep-report", args=[after.pk]), {"before": before.pk}).content.decode()
    assert html.index('data-go-no-go="no-go"') < html.index("Pairs by status")
    assert "exit code 2" in html
    rows = re.findall(r'<tr data-status="(\w+)"><td>\w+</td><td class="num">(\d+)</td><td class="num">(\d+)</td>', html)
    assert [r[0] for r in rows][:4] == ["offline", "timeout", "failed", "degraded"]
    assert dict((s, (int(b), int(a))) for s, b, a in rows)["timeout"] == (0, 1)
    assert dict((s, (int(b), int(a))) for s, b, a in rows)["ok"] == (3, 2)
    Sweep.objects.filter(pk=before.pk).update(verdict="pass")
    assert 'data-go-no-go="go"' in viewer.get(reverse("sweep-report", args=[before.pk])).content.decode()


def test_the_schedules_page_lists_scheduled_sweeps_not_the_products_own_jobs(viewer):
    defaults.ensure_schedules()
    html = viewer.get(reverse("schedules")).content.decode()
    assert f'data-schedule="{defaults.NIGHTLY_TASK_NAME}"' in html
    listed = re.findall(r'data-schedule="([^"]+)"', html)
    assert listed == [defaults.NIGHTLY_TASK_NAME]  # not the reaper, not prune
    assert re.search(r"data-next-run><time", html) and "Add a schedule" not in html
    reaper = PeriodicTask.objects.get(name=defaults.REAPER_TASK_NAME)
    assert viewer.get(reverse("schedule-edit", args=[reaper.pk])).status_code == 403


def test_an_operator_adds_and_disables_a_scheduled_sweep(operator):
    make_nodes(["k1", "k2"])
    defaults.ensure_schedules()
    form = {"name": "rack A hourly", "kind": "connectivity", "backend": "gloo", "nodes": "k2, k1", "cron": "0 * * * *"}
    refused = csrf_post(operator, reverse("schedule-new"), {**form, "cron": "61 * * * *", "enabled": "on"})
    assert refused.status_code == 200 and not PeriodicTask.objects.filter(name="rack A hourly").exists()
    assert csrf_post(operator, reverse("schedule-new"), {**form, "nodes": "k1, nope"}).status_code == 200
    assert csrf_post(operator, reverse("schedule-new"), {**form, "cron": "0 * * * 8"}).status_code == 200  # no day 8
    assert (
        csrf_post(operator, reverse("schedule-new"), {**form, "name": "monthly", "cron": "0 2 31 * *"}).status_code
        == 302
    )
    assert PeriodicTask.objects.get(name="monthly").crontab.day_of_month == "31"
    assert csrf_post(operator, reverse("schedule-new"), {**form, "enabled": "on"}).status_code == 302
    task = PeriodicTask.objects.get(name="rack A hourly")
    assert task.task == vocabulary.TASK_SCHEDULED_SWEEP and task.enabled and task.queue == "server"
    assert json.loads(task.kwargs) == {"kind": "connectivity", "backend": "gloo", "nodes": ["k1", "k2"]}
    assert csrf_post(operator, reverse("schedule-edit", args=[task.pk]), form).status_code == 302  # unticked
    assert not PeriodicTask.objects.get(pk=task.pk).enabled
    reaper = PeriodicTask.objects.get(name=defaults.REAPER_TASK_NAME)
    assert operator.get(reverse("schedule-edit", args=[reaper.pk])).status_code == 404  # never offered


def test_the_admin_says_online_or_offline_hides_internal_jobs_and_names_plurals_right(client):
    client.force_login(User.objects.create_superuser("root", password="x" * 12))
    make_nodes(["a1"], online=False)
    defaults.ensure_schedules()
    nodes = client.get("/admin/cluster_health/node/").content.decode()
    assert "offline" in nodes and "icon-yes.svg" not in nodes
    assert re.search(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC", nodes)  # the dashboard's format, 24-hour
    tasks = client.get("/admin/django_celery_beat/periodictask/").content.decode()
    assert defaults.NIGHTLY_TASK_NAME in tasks and defaults.REAPER_TASK_NAME not in tasks
    index = client.get("/admin/").content.decode()
    assert "Alert deliveries" in index and "Alert deliverys" not in index and "Solar events" not in index
    assert "API tokens" in index and "Api tokens" not in index


def test_a_large_fleet_lists_its_problems_first_and_counts_the_rest(viewer, monkeypatch):
    from cluster_health.web.views import nodes as views

    monkeypatch.setattr(views, "NODES_PAGE_ROWS", 3)
    nodes = make_nodes([f"l{i}" for i in range(5)])
    make_sweep(nodes, {("l3", "l4"): TIMEOUT})
    html = viewer.get(reverse("nodes")).content.decode()
    assert re.findall(r'<tr data-node="(\w+)"', html) == ["l3", "l4", "l0"]
    assert "2 more nodes" in html and "5 of 5 online" in html
    assert len(re.findall(r'<tr data-node="', viewer.get(reverse("nodes"), {"all": "1"}).content.decode())) == 5


def test_the_overview_and_sweep_header_use_the_one_format_and_live_ages(viewer):
    nodes = make_nodes(["t1", "t2"])
    sweep = make_sweep(nodes, {})
    overview = viewer.get(reverse("overview")).content.decode()
    # The node table's heartbeat age is kept current by times.js from its first render, titled in the one format.
    assert re.search(r'<time datetime="[^"]+" data-ago title="\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC">', overview)
    header = viewer.get(reverse("sweep", args=[sweep.pk])).content.decode()
    assert re.search(r'<time datetime="[^"]+">\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC</time>', header)
