"""The group matrix and its drill-down through the API and the sweep state: grouping, storage, bounds."""

import json

import pytest
from django.contrib.auth.models import User
from django.utils import timezone

from cluster_health.core import groupmatrix, matrix
from cluster_health.models import ApiToken, Node, PairProbe, Sweep, SweepMatrix
from cluster_health.retention import collapse
from cluster_health.shapes import matrices
from tests.support.dashboard_rows import make_nodes, make_sweep

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("memory_channel_layer")]

NAMES = ["rack1-a", "rack1-b", "rack1-c", "rack2-a", "rack2-b", "rack3-a"]


@pytest.fixture
def viewer_client(client):
    client.force_login(User.objects.create_user("viewer", password="pw-viewer-123"))
    return client


def worst_of(payload, g, h):
    names = payload["groups"]
    k = groupmatrix.cell_index(names.index(g), names.index(h), len(names))
    return payload["status_codes"][matrix.decode(payload["worst"], "B")[k]]


def counts_of(payload, g, h):
    names = payload["groups"]
    k = groupmatrix.cell_index(names.index(g), names.index(h), len(names))
    return tuple(matrix.decode(payload[key], "I")[k] for key in ("pairs", "tested", "bad"))


def racks_sweep(**kw):
    nodes = make_nodes(NAMES)
    failing = {
        ("rack1-b", "rack2-a"): {"status": "failed", "stage": "connect", "reason": "refused", "busbw_gbps": None}
    }
    return make_sweep(nodes, failing, **{"verdict": "fail", **kw})


def test_the_group_matrix_names_the_rack_pair_that_failed(viewer_client):
    sweep = racks_sweep()
    r = viewer_client.get(f"/api/sweeps/{sweep.pk}/groups")
    assert r.status_code == 200, r.content
    payload = r.json()
    assert payload["groups"] == ["rack1", "rack2", "rack3"] and payload["sizes"] == [3, 2, 1]
    assert worst_of(payload, "rack1", "rack2") == "failed"
    assert counts_of(payload, "rack1", "rack2") == (6, 6, 1)
    assert {worst_of(payload, g, h) for g, h in [("rack1", "rack1"), ("rack2", "rack2"), ("rack1", "rack3")]} == {"ok"}
    assert counts_of(payload, "rack3", "rack3") == (0, 0, 0)  # one node: no pair inside
    assert worst_of(payload, "rack3", "rack3") == "untested"


def test_a_closed_sweep_keeps_the_grouping_it_was_first_read_with(viewer_client):
    sweep = racks_sweep()
    first = viewer_client.get(f"/api/sweeps/{sweep.pk}/groups").content
    assert json.loads(SweepMatrix.objects.get(sweep=sweep).groups)["groups"] == ["rack1", "rack2", "rack3"]
    Node.objects.filter(name__startswith="rack").update(topology_group="everything")
    assert viewer_client.get(f"/api/sweeps/{sweep.pk}/groups").content == first


def test_an_open_sweep_is_summed_up_again_on_every_read(viewer_client):
    sweep = racks_sweep(status="running", verdict="")
    before = viewer_client.get(f"/api/sweeps/{sweep.pk}/groups").json()
    assert worst_of(before, "rack1", "rack3") == "ok"
    PairProbe.objects.filter(sweep=sweep, node_a__name="rack1-a", node_b__name="rack3-a").update(status="timeout")
    after = viewer_client.get(f"/api/sweeps/{sweep.pk}/groups").json()
    assert worst_of(after, "rack1", "rack3") == "timeout"


def test_declared_groups_beat_the_hostname_pattern(viewer_client):
    sweep = racks_sweep(status="running", verdict="")
    Node.objects.filter(name__in=["rack1-a", "rack2-a"]).update(topology_group="leaf-7")
    payload = viewer_client.get(f"/api/sweeps/{sweep.pk}/groups").json()
    assert payload["groups"] == ["leaf-7", "rack1", "rack2", "rack3"]
    assert payload["sizes"] == [2, 2, 1, 1]
    assert (
        payload["origin"]
        == "Each node grouped by its declared label (2 nodes) and the default hostname pattern (4 nodes)."
    )


def test_a_topology_sweep_is_summed_up_by_the_groups_it_planned_with(viewer_client):
    planned = {"east": ["rack1-a", "rack2-a", "rack3-a"], "west": ["rack1-b", "rack1-c", "rack2-b"]}
    sweep = racks_sweep(kind="topology", params={"groups": planned})
    payload = viewer_client.get(f"/api/sweeps/{sweep.pk}/groups").json()
    assert payload["groups"] == ["east", "west"] and payload["grouping"] == "planned"
    assert payload["origin"] == "Grouped as the sweep planned."  # planned before the origin was kept
    assert worst_of(payload, "east", "west") == "failed"


def test_a_drill_down_is_the_node_matrix_of_one_cell(viewer_client):
    sweep = racks_sweep()
    both = viewer_client.get(f"/api/sweeps/{sweep.pk}/matrix?group=rack1&group=rack2").json()
    assert both["nodes"] == ["rack1-a", "rack1-b", "rack1-c", "rack2-a", "rack2-b"]
    assert both["groups"] == ["rack1", "rack2"] and both["sweep"] == sweep.pk
    assert both["member_groups"] == ["rack1", "rack1", "rack1", "rack2", "rack2"]
    k = matrix.pair_index(1, 3, 5)
    assert matrix.STATUS_CODES[matrix.decode(both["status"], "B")[k]] == "failed"
    assert both["details"][str(k)] == ["connect", "refused", None]
    one = viewer_client.get(f"/api/sweeps/{sweep.pk}/matrix?group=rack2").json()
    assert one["nodes"] == ["rack2-a", "rack2-b"]
    whole = viewer_client.get(f"/api/sweeps/{sweep.pk}/matrix").json()
    assert len(whole["nodes"]) == 6  # without groups: the whole matrix, as before


def test_a_collapsed_sweep_drills_down_from_its_stored_matrix(viewer_client):
    sweep = racks_sweep()
    before = viewer_client.get(f"/api/sweeps/{sweep.pk}/matrix?group=rack1&group=rack2").json()
    assert collapse(sweep, timezone.now()) == 14
    assert Sweep.objects.get(pk=sweep.pk).collapsed_ok == 14
    after = viewer_client.get(f"/api/sweeps/{sweep.pk}/matrix?group=rack1&group=rack2").json()
    assert after == before


@pytest.mark.parametrize(
    ("query", "status", "message"),
    [
        ("group=rack9", 404, "has no group 'rack9'"),
        ("group=rack1&group=rack2&group=rack3", 400, "at most 2"),
        ("group=" + "x" * 256, 400, "1 to 255 characters"),
        ("group=", 400, "1 to 255 characters"),
    ],
)
def test_a_bad_drill_down_is_refused_with_a_message(viewer_client, query, status, message):
    sweep = racks_sweep()
    r = viewer_client.get(f"/api/sweeps/{sweep.pk}/matrix?{query}")
    assert r.status_code == status
    assert message in r.json()["error"]


def test_a_drill_down_larger_than_the_limit_is_refused(viewer_client, settings):
    settings.DRILL_DOWN_MAX_NODES = 4
    sweep = racks_sweep()
    r = viewer_client.get(f"/api/sweeps/{sweep.pk}/matrix?group=rack1&group=rack2")
    assert r.status_code == 400 and "CLUSTER_HEALTH_DRILL_DOWN_MAX_NODES" in r.json()["error"]
    assert viewer_client.get(f"/api/sweeps/{sweep.pk}/matrix?group=rack1").status_code == 200


def test_too_many_groups_answer_what_to_do_instead_of_cells(viewer_client, settings, monkeypatch):
    monkeypatch.setattr(groupmatrix, "MAX_GROUPS", 2)
    sweep = racks_sweep(status="running", verdict="")
    payload = viewer_client.get(f"/api/sweeps/{sweep.pk}/groups").json()
    assert payload["groups"] is None and "CLUSTER_HEALTH_GROUP_PATTERN" in payload["message"]


def test_the_sweep_state_sends_the_group_matrix_instead_of_a_node_matrix_too_large_to_draw(viewer_client, settings):
    sweep = racks_sweep()
    small = viewer_client.get(f"/sweeps/{sweep.pk}/state.json").json()
    assert len(small["matrix"]["nodes"]) == 6 and "groups" not in small
    settings.NODE_MATRIX_MAX_NODES = 5
    large = viewer_client.get(f"/sweeps/{sweep.pk}/state.json").json()
    assert large["matrix"] is None and large["node_matrix_max_nodes"] == 5
    assert large["groups"]["groups"] == ["rack1", "rack2", "rack3"]
    assert worst_of(large["groups"], "rack1", "rack2") == "failed"


def test_the_group_matrix_needs_a_login_or_a_token(client):
    sweep = racks_sweep()
    assert client.get(f"/api/sweeps/{sweep.pk}/groups").status_code == 401
    token = ApiToken.issue(User.objects.create_user("reader"), "ro", scope=ApiToken.READ)[1]
    r = client.get(f"/api/sweeps/{sweep.pk}/groups", HTTP_AUTHORIZATION=f"Bearer {token}")
    assert r.status_code == 200 and r.json()["sweep"] == sweep.pk
    assert client.get("/api/sweeps/999999/groups", HTTP_AUTHORIZATION=f"Bearer {token}").status_code == 404


def test_storing_a_closed_sweep_stores_its_group_matrix_too():
    sweep = racks_sweep()
    matrices.store_matrix(sweep)
    stored = SweepMatrix.objects.get(sweep=sweep)
    assert json.loads(stored.groups)["groups"] == ["rack1", "rack2", "rack3"]
