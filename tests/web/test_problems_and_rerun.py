"""What an operator reads first (one line per problem) and does from the page (probe pairs again, audited)."""

import html as entities
import re

import pytest
from django.urls import reverse

from cluster_health.actions.models import SlurmDrain
from cluster_health.models import AuditEntry, Finding, PairProbe, Sweep
from tests.support.dashboard_rows import make_nodes, make_sweep, make_user

pytestmark = pytest.mark.django_db

TIMEOUT = {
    "status": "timeout",
    "stage": "connect",
    "reason": "connect_timeout",
    "busbw_gbps": None,
    "hint": "firewall?",
}
SLOW = {"status": "degraded", "reason": "below_peers", "busbw_gbps": 0.024}


def faulted_sweep():
    """host1<->host2 firewalled, host3 slow with its peers: two problems over five findings."""
    nodes = make_nodes(["host1", "host2", "host3", "host4"])
    sweep = make_sweep(
        nodes,
        {("host1", "host2"): TIMEOUT, ("host1", "host3"): SLOW, ("host2", "host3"): SLOW, ("host3", "host4"): SLOW},
        verdict="fail",
    )
    slow = [f"{a}<->{b}" for a, b in (("host1", "host3"), ("host2", "host3"), ("host3", "host4"))]
    rows = [
        ("fail", "link_failed", "host1<->host2", "host1<->host2 timeout at connect (connect_timeout): firewall?", []),
        ("warn", "slow_node", "host3", "every link of host3 is slow next to its peers", slow),
        ("warn", "below_baseline", "host1<->host3", "host1<->host3 degraded", []),
        ("info", "confirmed", "host3<->host4", "host3<->host4 slow again: confirmed, host3", ["host3<->host4"]),
    ]
    for severity, code, subject, text, pairs in rows:
        detail = {"busbw_gbps": 0.024} if code == "slow_node" else {}
        Finding.objects.create(
            sweep=sweep, severity=severity, code=code, subject=subject, text=text, pairs=pairs, detail=detail
        )
    return sweep


def problem_lines(html):
    section = re.search(r"<section class=\"card problems\".*?</section>", html, re.S).group(0)
    title = re.sub(r"<[^>]+>", "", re.search(r"<h2 data-problems-title>(.*?)</h2>", section).group(1))
    lines = [
        entities.unescape(re.sub(r"\s+", " ", re.sub(r"<[^>]+>", "", s))).strip()
        for s in re.findall(r"<summary>(.*?)</summary>", section, re.S)
    ]
    return title, lines


def test_the_sweep_overview_and_report_open_with_one_line_per_problem_and_its_evidence(client):
    client.force_login(make_user("viewer", operator=False))
    sweep = faulted_sweep()
    want = (
        "2 problems",
        [
            "fail host1<->host2 blocked: connections time out (a firewall dropping packets?) (1 finding)",
            "warn host3's links at ~190 Mbit/s (3 findings)",
        ],
    )
    for url in (reverse("sweep", args=[sweep.pk]), reverse("overview"), reverse("sweep-report", args=[sweep.pk])):
        html = client.get(url).content.decode()
        assert problem_lines(html) == want, url
    # Expanded, host3's line holds the slow node, its link below baseline and the pass's line, each with "why".
    html = client.get(reverse("sweep", args=[sweep.pk])).content.decode()
    host3 = re.search(r'data-problem="host3">(.*?)</details>', html, re.S).group(1)
    assert host3.count('class="why"') == 3 and "host3&lt;-&gt;host4 slow again" in host3
    # The same problems in the sweep JSON, by finding id, beside the findings (which stay as they were).
    state = client.get(reverse("sweep-state", args=[sweep.pk])).json()
    api = client.get(reverse("api-sweep", args=[sweep.pk])).json()
    ids = {f["subject"]: f["id"] for f in state["findings"]}
    for doc in (state, api):
        assert [(p["severity"], p["culprit"], p["findings"]) for p in doc["problems"]] == [
            ("fail", "host1<->host2", [ids["host1<->host2"]]),
            ("warn", "host3", [ids["host3"], ids["host1<->host3"], ids["host3<->host4"]]),
        ]
        assert len(doc["findings"]) == 4


def test_an_operator_probes_the_failed_and_suspect_pairs_again_and_it_is_audited(client):
    sweep = faulted_sweep()
    client.force_login(make_user("viewer", operator=False))
    page = client.get(reverse("sweep", args=[sweep.pk])).content.decode()
    assert "data-rerun" not in page and 'data-export="csv"' in page and 'data-export="json"' in page
    assert client.post(reverse("sweep-rerun", args=[sweep.pk])).status_code == 403
    client.force_login(make_user("op", operator=True))
    page = client.get(reverse("sweep", args=[sweep.pk])).content.decode()
    assert "Probe the 4 failed or suspect pairs again" in page
    answer = client.post(reverse("sweep-rerun", args=[sweep.pk]))
    again = Sweep.objects.latest("pk")
    assert answer.status_code == 302 and answer.url == reverse("sweep", args=[again.pk])
    assert (again.kind, again.source, again.requested_by.username) == ("pairs", "page", "op")
    assert again.params["pairs"] == [["host1", "host2"], ["host1", "host3"], ["host2", "host3"], ["host3", "host4"]]
    entry = AuditEntry.objects.get(sweep=again)
    assert (entry.actor, entry.action, entry.source) == ("op", "sweep_start", "page")
    assert entry.text.startswith(f"re-run of 4 pair(s) of sweep #{sweep.pk}: host1<->host2, host1<->host3")
    # A finding's pairs (its page offers it), and one pair (from its page).
    slow = Finding.objects.get(sweep=sweep, code="slow_node")
    assert "Probe its 3 pairs again" in client.get(reverse("finding", args=[sweep.pk, slow.pk])).content.decode()
    client.post(reverse("sweep-rerun", args=[sweep.pk]), {"finding": slow.pk})
    assert Sweep.objects.latest("pk").params["pairs"] == [["host1", "host3"], ["host2", "host3"], ["host3", "host4"]]
    pair_page = client.get(reverse("pair", args=["host1", "host2"])).content.decode()
    assert "Probe this pair again" in pair_page and reverse("api-pair-history", args=["host1", "host2"]) in pair_page
    client.post(reverse("sweep-rerun", args=[sweep.pk]), {"pair": "host1<->host2"})
    assert Sweep.objects.latest("pk").params["pairs"] == [["host1", "host2"]]
    assert AuditEntry.objects.filter(action="sweep_start", actor="op").count() == 3


def test_a_failed_links_why_page_shows_the_probe_it_rests_on(client):
    client.force_login(make_user("viewer", operator=False))
    sweep = faulted_sweep()
    failed = Finding.objects.get(sweep=sweep, code="link_failed")
    page = client.get(reverse("finding", args=[sweep.pk, failed.pk])).content.decode()
    assert "keeps no chain" not in page and "No probe is listed" not in page
    chain = re.search(r"<ol data-chain>(.*?)</ol>", page, re.S).group(1)
    assert "host1&lt;-&gt;host2: timeout at connect (connect_timeout): firewall?" in chain
    assert re.search(r"<table[^>]*data-support>.*host1 ↔ host2.*timeout", page, re.S)


def test_a_node_page_says_whether_cluster_health_drained_it_and_why_and_a_pair_page_since_when_it_fails(client):
    client.force_login(make_user("viewer", operator=False))
    sweep = faulted_sweep()
    SlurmDrain.objects.create(node="host3", slurm_node="host3", sweep=sweep, reason="slow next to its peers")
    page = client.get(reverse("node", args=["host3"])).content.decode()
    slurm = re.sub(r"<[^>]+>|\s+", " ", re.search(r"data-slurm-state>(.*?)</section>", page, re.S).group(1))
    assert "Drained by cluster-health" in slurm and f"sweep #{sweep.pk}" in slurm and "slow next to its peers" in slurm
    assert "Never drained by cluster-health" in client.get(reverse("node", args=["host4"])).content.decode()
    page = client.get(reverse("pair", args=["host1", "host2"])).content.decode()
    since = re.sub(r"<[^>]+>", "", re.search(r"<dd data-pair-since>(.*?)</dd>", page, re.S).group(1))
    assert since == f"failing since sweep #{sweep.pk} (1 probe in a row)"


def test_progress_counts_the_confirmation_pass_apart_from_the_sweeps_pairs():
    sweep = make_sweep(make_nodes(["c1", "c2", "c3"]), status="running", verdict="unknown")
    sweep.params = {**sweep.params, "confirm_first": 2}
    sweep.save()
    a, b = PairProbe.objects.filter(sweep=sweep).values_list("node_a", "node_b").first()
    PairProbe.objects.create(sweep=sweep, round=2, node_a_id=a, node_b_id=b, status="running")
    progress = sweep.progress()
    assert (progress["pairs_done"], progress["pairs_total"]) == (3, 3)
    assert (progress["again_done"], progress["again_total"]) == (0, 1)
