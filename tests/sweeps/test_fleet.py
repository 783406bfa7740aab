"""Absent is not healthy: a sweep covers the fleet (every active node), an offline one fails it, retiring is explicit."""

import json
from datetime import timedelta

import pytest
from django.contrib.auth.models import Group, User
from django.core.management import call_command
from django.core.management.base import CommandError
from django.utils import timezone

from cluster_health import sweeps
from cluster_health.core import textmatrix
from cluster_health.models import Finding, GroupProbe, Node, PairProbe
from cluster_health.shapes import documents
from devtools.sweep_driver import heartbeat, result_for
from tests.support.dashboard_rows import make_user

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("memory_channel_layer")]


def fleet(*names, silent=("n2",), minutes=3):
    for n in names:
        heartbeat(n)
    Node.objects.filter(name__in=silent).update(last_heartbeat=timezone.now() - timedelta(minutes=minutes))


def run(driver, **request):
    sweep = driver.sweep(**request)
    driver.answer_all(lambda c: result_for(c))
    sweep.refresh_from_db()
    return sweep


def fail_subjects(sweep):
    return list(Finding.objects.filter(sweep=sweep, severity="fail").values_list("code", "subject"))


def test_it_fails_a_default_sweep_with_an_offline_node_and_names_it(driver):
    fleet("n0", "n1", "n2")
    sweep = run(driver, kind="full", sizes=[1024])
    assert sweep.nodes == ["n0", "n1", "n2"] and sweep.verdict == "fail"
    offline = PairProbe.objects.filter(sweep=sweep, status="offline")
    assert {(p.node_a.name, p.node_b.name) for p in offline} == {("n0", "n2"), ("n1", "n2")}
    assert {p.reason for p in offline} == {"agent_offline"}
    assert all(
        p.hint.startswith("n2 offline: last heartbeat 3 min ago (") and p.hint.endswith(" UTC)") for p in offline
    )
    assert PairProbe.objects.get(sweep=sweep, node_a__name="n0", node_b__name="n1").status == "ok"
    assert fail_subjects(sweep) == [("node_offline", "n2")]  # the group's offline is n2's finding, not the cluster's
    assert GroupProbe.objects.get(sweep=sweep).status == "offline"


@pytest.mark.parametrize("kind", ["quick", "connectivity", "discover", "group"])
def test_it_fails_every_kind_of_default_sweep_with_an_offline_node(driver, kind):
    fleet("n0", "n1", "n2")
    sweep = run(driver, kind=kind)
    assert "n2" in sweep.nodes and sweep.verdict == "fail"
    assert ("node_offline", "n2") in fail_subjects(sweep)


def test_it_makes_the_group_collective_offline_when_a_member_is_offline(driver):
    fleet("n0", "n1", "n2")
    sweep = run(driver, kind="group")
    group = GroupProbe.objects.get(sweep=sweep)
    assert group.nodes == ["n0", "n1", "n2"]
    assert (group.status, group.reason) == ("offline", "agent_offline")
    assert group.hint.startswith("n2 offline: last heartbeat") and "n2 (rank 2) would never join" in group.hint
    assert fail_subjects(sweep) == [("node_offline", "n2")]


def test_it_lists_an_offline_node_in_the_launch_rehearsal(driver):
    fleet("n0", "n1", "n2")
    sweep = run(driver, kind="preflight", master="n0", master_port=29500)
    assert sweep.verdict == "fail"
    assert ("node_offline", "n2") in fail_subjects(sweep)


def test_it_says_never_heard_from_for_a_node_without_heartbeat(driver):
    fleet("n0", "n1", silent=())
    Node.objects.create(name="n2", address="127.0.0.1")
    sweep = run(driver, kind="connectivity")
    hints = set(PairProbe.objects.filter(sweep=sweep, status="offline").values_list("hint", flat=True))
    assert hints == {"n2 offline: never heard from"}
    assert "never heard from" in Finding.objects.get(sweep=sweep, code="node_offline").text


def test_it_lists_nodes_that_were_not_probed_in_the_text_and_json(driver):
    fleet("n0", "n1", "n2")
    report = documents.sweep_json(run(driver, kind="connectivity"))
    assert [a["node"] for a in report["offline_at_start"]] == ["n2"]
    text = textmatrix.render(report)
    assert "not probed: n2, offline when the sweep started: last heartbeat 3 min ago (" in text


def test_it_leaves_retired_nodes_out_and_passes(driver):
    fleet("n0", "n1", "n2")
    call_command("nodes", "retire", "n2")
    sweep = run(driver, kind="full", sizes=[1024])
    assert sweep.nodes == ["n0", "n1"] and sweep.verdict == "pass"
    call_command("nodes", "activate", "n2")
    assert run(driver, kind="quick").verdict == "fail"


def test_it_refuses_a_sweep_that_names_a_retired_node(driver):
    fleet("n0", "n1", "n2", silent=())
    Node.objects.get(name="n2").retire()
    with pytest.raises(sweeps.SweepRequestError, match="n2 retired"):
        driver.sweep(kind="connectivity", nodes=["n0", "n2"])
    with pytest.raises(sweeps.SweepRequestError, match="n2 retired"):
        driver.sweep(kind="pairs", pairs=[["n1", "n2"]])
    with pytest.raises(CommandError, match="n2 retired"):
        call_command("sweep", "--nodes", "n0,n2")


def test_it_keeps_a_retired_node_retired_when_its_agent_comes_back():
    fleet("n0", silent=())
    Node.objects.get(name="n0").retire()
    heartbeat("n0")
    assert Node.objects.get(name="n0").active is False


def test_its_nodes_command_retires_activates_and_lists_active_as_json(capsys):
    fleet("n0", "n1", silent=())
    call_command("nodes", "retire", "n1")
    assert "n1: retired" in capsys.readouterr().out
    call_command("nodes", "--json")
    rows = {n["name"]: n for n in json.loads(capsys.readouterr().out)["nodes"]}
    assert rows["n0"]["active"] is True and rows["n1"]["active"] is False
    assert rows["n1"]["retired_at"] and rows["n0"]["last_heartbeat"]
    call_command("nodes", "activate", "n1")
    assert Node.objects.get(name="n1").active and Node.objects.get(name="n1").retired_at is None
    with pytest.raises(CommandError, match="unknown node"):
        call_command("nodes", "retire", "nope")


def test_its_nodes_command_lists_offline_nodes_first_and_flags_silent_ones(capsys, settings):
    settings.STALE_NODE_DAYS = 7
    fleet("n0", "n1", "n2", silent=("n1",), minutes=8 * 24 * 60)
    call_command("nodes")
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("n1") and "OFFLINE" in lines[0]
    assert "silent for 8 days: retire it if it is gone" in lines[0]


def test_its_api_retires_and_activates_with_the_operator_permission(client):
    fleet("n0", silent=())
    viewer = User.objects.create_user("viewer", password="pw-viewer-123")
    client.force_login(viewer)
    r = client.post("/api/nodes/n0/retire")
    assert r.status_code == 403 and "operator" in r.json()["error"]
    op = User.objects.create_user("op", password="pw-op-12345")
    op.groups.add(Group.objects.get(name="operators"))
    client.force_login(op)
    assert client.get("/api/nodes/n0/retire").status_code == 405
    r = client.post("/api/nodes/n0/retire")
    assert r.status_code == 200 and r.json()["active"] is False
    assert Node.objects.get(name="n0").active is False
    assert client.post("/api/nodes/n0/activate").json()["active"] is True
    assert client.post("/api/nodes/nope/retire").status_code == 404


def test_its_overview_counts_the_fleet_and_shows_retired_and_silent_nodes_apart(client, settings):
    settings.STALE_NODE_DAYS = 7
    client.force_login(make_user("viewer", operator=False))
    fleet("a1", "a2", "gone", "old", silent=("gone",), minutes=10 * 24 * 60)
    Node.objects.get(name="old").retire()
    html = client.get("/").content.decode()
    assert "2 of 3 online" in html
    assert html.index('data-node="gone"') < html.index('data-node="a1"')
    assert "silent for 10 days — retire it if it is gone" in html
    assert 'data-retired-node="old"' in html and 'data-node="old"' not in html
    state = client.get("/nodes.json").json()
    assert [n["name"] for n in state["nodes"]] == ["gone", "a1", "a2"]
    assert [n["name"] for n in state["retired"]] == ["old"] and state["online"] == 2


def test_its_admin_action_retires_nodes(client):
    fleet("n0", "n1", silent=())
    User.objects.create_superuser("admin", password="pw-admin-123")
    client.login(username="admin", password="pw-admin-123")
    ids = list(Node.objects.filter(name="n1").values_list("pk", flat=True))
    r = client.post("/admin/cluster_health/node/", {"action": "retire", "_selected_action": ids})
    assert r.status_code == 302
    assert list(Node.objects.filter(active=False).values_list("name", flat=True)) == ["n1"]
