"""A node is offline on the Nodes page and its own page only if its agent was: a peer that answered
is never "offline" on the account of a node whose agent died during the sweep."""

import re

import pytest
from django.urls import reverse

from cluster_health.models import Finding
from tests.support.dashboard_rows import make_nodes, make_sweep, make_user
from tests.support.six_hosts import SIX, six_host_pairs

pytestmark = pytest.mark.django_db

GONE = "host5 offline: last heartbeat 2 min ago (10.0.0.5)"


@pytest.fixture
def viewer(client):
    client.force_login(make_user("viewer", operator=False))
    return client


def died_mid_sweep(with_finding: bool):
    """The bed's faults with host5's agent stopped after its first round: one pair of it passed."""
    nodes = make_nodes(SIX)
    results = {}
    for p in six_host_pairs():
        fields = {"status": p["status"], "stage": p["stage"], "reason": p["reason"], "busbw_gbps": p["busbw_gbps"]}
        if p["status"] == "offline":
            fields["hint"] = GONE
        if (p["a"], p["b"]) == ("host2", "host5"):
            fields["hint"] = "store timed out; host5 then stopped sending heartbeats (agent gone)"
        if (p["a"], p["b"]) == ("host5", "host6"):  # probed before the agent stopped
            fields = {"status": "ok", "stage": "bandwidth", "busbw_gbps": 0.42}
        results[(p["a"], p["b"])] = fields
    sweep = make_sweep(nodes, results, verdict="fail", kind="full")
    if with_finding:
        Finding.objects.create(
            sweep=sweep, severity="fail", code="node_offline", subject="host5", text="host5 went offline"
        )
    return sweep


def rows(html):
    return dict(re.findall(r'<tr data-node="(\w+)"[^>]*data-result="(\w+)"', html))


@pytest.mark.parametrize("with_finding", [True, False], ids=["named-by-its-finding", "named-by-its-pairs"])
def test_only_the_node_whose_agent_died_is_offline(viewer, with_finding):
    sweep = died_mid_sweep(with_finding)
    html = viewer.get(reverse("nodes")).content.decode()
    assert rows(html) == {
        "host1": "failing",  # its firewalled link to host2
        "host2": "failing",
        "host3": "ok",
        "host4": "ok",
        "host5": "failing",
        "host6": "ok",
    }
    for healthy in ("host3", "host4", "host6"):
        row = html[html.index(f'data-node="{healthy}"') :].split("</tr>", 1)[0]
        assert "pill-offline" not in row and "failing since" not in row, row
        assert ("host5 offline (those pairs are its)" in row) == (healthy != "host6"), row  # host6 met it in time
    host5 = html[html.index('data-node="host5"') :].split("</tr>", 1)[0]
    assert f'<span class="pill pill-offline">offline</span> in <a href="/sweeps/{sweep.pk}/">' in host5
    assert "failing since" in host5
    host2 = html[html.index('data-node="host2"') :].split("</tr>", 1)[0]
    assert "pill-timeout" in host2 and 'host1</a> <span class="small">(timeout)' in host2
    assert "host5</a>" not in host2  # the pair that timed out as host5 stopped is host5's

    for healthy in ("host3", "host4", "host6"):
        page = viewer.get(reverse("node", args=[healthy])).content.decode()
        assert 'data-node-health="ok"' in page and "Result offline" not in page
        assert re.search(r'Result <span class="pill pill-ok" data-result>ok</span>', page)
        assert ("host5 offline (not held against" in page) == (healthy != "host6") and "failing since" not in page
    page = viewer.get(reverse("node", args=["host5"])).content.decode()
    assert re.search(r'Result <span class="pill pill-offline" data-result>offline</span> · failing since', page)
