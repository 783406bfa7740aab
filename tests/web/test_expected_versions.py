"""The versions a node must run (GET /api/expected, read by `agents check`): pinned by an operator, or a
strong majority of the fleet (two thirds of its active nodes and at least three), never a plurality; a
declared rolling upgrade accepts both; one node's malformed facts are refused at ingest and never a 500."""

from __future__ import annotations

import json
import time
from datetime import timedelta

import pytest
from django.contrib.auth.models import User
from django.utils import timezone

from agents import check
from cluster_health import ingest
from cluster_health.models import ApiToken, Node, RejectedMessage
from devtools.sweep_driver import heartbeat
from tests.agents.test_agent_check import HERE, run_check

ETH0 = {"name": "eth0", "up": True, "loopback": False, "mtu": 1500, "addresses": ["10.0.0.5"]}


def facts(torch: str, cuda: str = "12.4", gpus: int = 8) -> dict:
    return {
        "versions": {"torch": torch, "cuda": cuda, "nccl": "2.21.5"},
        "interfaces": [ETH0],
        "gpus": {"devices": [{}] * gpus},
    }


def fleet(*torches: str) -> None:
    for i, torch in enumerate(torches):
        heartbeat(f"n{i}", address="10.0.0.5", facts=facts(torch))


@pytest.fixture
def viewer(client):
    client.force_login(User.objects.create_user("viewer", password="pw-viewer-123"))
    return client


@pytest.mark.django_db
def test_it_expects_nothing_a_plurality_reports(viewer):
    """A rolling upgrade half done: the old version is the plurality, not a strong majority: no expectation,
    so `agents check` on an upgraded node does not fail (a prolog would drain the upgraded slice)."""
    fleet("2.5.1", "2.5.1", "2.5.1", "2.6.0", "2.6.0")
    data = viewer.get("/api/expected").json()
    assert data["versions"]["torch"] is None and "torch" not in data["accepted"]
    assert data["versions"]["cuda"] == "12.4" and data["accepted"]["cuda"] == ["12.4"]  # 5 of 5
    assert (data["fleet"], data["nodes"]) == (5, 5)


@pytest.mark.django_db
def test_a_strong_majority_needs_two_thirds_of_the_active_fleet_and_three_nodes(viewer):
    fleet("2.6.0", "2.6.0")
    assert viewer.get("/api/expected").json()["versions"]["torch"] is None  # two nodes agree: too few
    fleet("2.6.0", "2.6.0", "2.6.0", "2.5.1")
    assert viewer.get("/api/expected").json()["versions"]["torch"] == "2.6.0"  # 3 of 4
    for name in ("n4", "n5"):  # registered, silent: still the fleet
        Node.objects.create(name=name, address="10.0.0.9")
    assert viewer.get("/api/expected").json()["versions"]["torch"] is None  # 3 of 6
    Node.objects.get(name="n5").retire()
    Node.objects.get(name="n4").retire()
    assert viewer.get("/api/expected").json()["versions"]["torch"] == "2.6.0"  # retired nodes are not the fleet


@pytest.mark.django_db
def test_pinned_versions_win_over_the_fleet_and_a_declared_upgrade_accepts_both(viewer, settings):
    fleet("2.5.1", "2.5.1", "2.5.1", "2.5.1")
    settings.EXPECTED_VERSIONS = {"torch": ["2.6.0", "2.5.1"], "nccl": ["2.23.4"]}
    settings.EXPECTED_UPGRADE_UNTIL = timezone.now() + timedelta(days=1)
    data = viewer.get("/api/expected").json()
    assert data["accepted"]["torch"] == ["2.6.0", "2.5.1"] and data["versions"]["torch"] is None
    assert data["versions"]["nccl"] == "2.23.4" and data["pinned"] == ["nccl", "torch"]
    assert data["versions"]["cuda"] == "12.4"  # not pinned: the fleet's
    settings.EXPECTED_UPGRADE_UNTIL = timezone.now() - timedelta(seconds=1)  # the window is over
    data = viewer.get("/api/expected").json()
    assert data["accepted"]["torch"] == ["2.6.0"] and data["versions"]["torch"] == "2.6.0"


@pytest.mark.django_db(transaction=True)
def test_agents_check_passes_either_version_of_a_declared_upgrade_and_fails_any_other(live_server, tmp_path, settings):
    fleet("0.0.1", "0.0.1", "0.0.1")  # the fleet's view, overruled by the pin
    user = User.objects.create_user("check", password="pw-check-123")
    token = tmp_path / "token"
    token.write_text(ApiToken.issue(user, "health check", scope=ApiToken.READ)[1])
    args = ("--json", "--server", live_server.url, "--token-file", str(token), "--name", "n0", "--no-agent")

    def torch_check() -> dict:
        report = json.loads(run_check(*args).stdout)
        return {c["name"]: c for c in report["checks"]}["torch_version"]

    settings.EXPECTED_VERSIONS = {"torch": ["9.9.9", HERE["torch"]]}
    settings.EXPECTED_UPGRADE_UNTIL = None  # declared until the setting changes
    assert torch_check()["status"] == "pass"
    settings.EXPECTED_VERSIONS = {"torch": ["9.9.9"]}
    found = torch_check()
    assert found["status"] == "fail" and found["detail"] == f"torch {HERE['torch']} here, the cluster runs 9.9.9"


def beat(node_facts: dict, name: str = "n0") -> dict:
    return {
        "v": 1,
        "node": name,
        "address": "10.0.0.5",
        "facts": node_facts,
        "agent_version": "t",
        "sent_at": time.time(),
    }


@pytest.mark.django_db
@pytest.mark.parametrize(
    "why, bad, words",
    [
        ("versions a list", {"versions": ["2.5.1"]}, "facts.versions"),
        ("a version an object", {"versions": {"torch": {"v": "2.5.1"}}}, "facts.versions.torch"),
        ("a version a number", {"versions": {"torch": 2.5}}, "facts.versions.torch"),
        ("interfaces an object", {"interfaces": {"eth0": "10.0.0.5"}}, "facts.interfaces"),
        ("an interface a string", {"interfaces": ["eth0"]}, "facts.interfaces"),
        ("addresses a string", {"interfaces": [{**ETH0, "addresses": "10.0.0.5"}]}, "facts.interfaces"),
        ("an interface's name a list", {"interfaces": [{**ETH0, "name": ["eth0"]}]}, "facts.interfaces"),
    ],
)
def test_malformed_facts_are_refused_at_ingest_and_the_expected_set_still_answers(viewer, why, bad, words):
    fleet("2.6.0", "2.6.0", "2.6.0")
    assert ingest.record_heartbeat(beat({**facts("2.6.0"), **bad})) == "rejected", why
    assert words in RejectedMessage.objects.get().error
    assert Node.objects.get(name="n0").facts == facts("2.6.0")
    # A row written before facts were checked (or by hand) answers too: that node's value counts for nothing.
    Node.objects.filter(name="n1").update(facts={**facts("2.6.0"), **bad})
    answer = viewer.get("/api/expected")
    assert answer.status_code == 200, why
    assert check.expected_from_answer(answer.json())["versions"]["cuda"] in (["12.4"], None)


@pytest.mark.django_db
@pytest.mark.parametrize("gpus", [[{"name": "H100"}], {"devices": 8}, "8", None])
def test_gpu_facts_of_any_shape_count_for_nothing_and_never_a_500(viewer, gpus):
    fleet("2.6.0", "2.6.0", "2.6.0", "2.6.0")
    Node.objects.filter(name="n0").update(facts={**facts("2.6.0"), "gpus": gpus})
    answer = viewer.get("/api/expected")
    assert answer.status_code == 200 and answer.json()["gpu_count"] == 8  # three of four
