"""What state.json tells a sweep page beyond the sweep JSON: groups or none, the last complete sweep, finding ids."""

import pytest

from cluster_health.models import Finding
from tests.support.dashboard_rows import make_nodes, make_sweep, make_user

pytestmark = pytest.mark.django_db


@pytest.fixture
def viewer(client):
    client.force_login(make_user("viewer", operator=False))
    return client


def state(client, sweep):
    r = client.get(f"/sweeps/{sweep.pk}/state.json")
    assert r.status_code == 200
    return r.json()


def test_a_fleet_without_topology_has_no_groups(viewer):
    flat = make_sweep(make_nodes(["host1", "host2", "host3"]))
    racks = make_sweep(make_nodes(["rack1-n1", "rack1-n2", "rack2-n1", "rack2-n2"]))
    assert state(viewer, flat)["grouped"] is False
    assert state(viewer, racks)["grouped"] is True
    assert 'id="groups" hidden' in viewer.get(f"/sweeps/{flat.pk}/").content.decode()
    assert 'id="groups" hidden' not in viewer.get(f"/sweeps/{racks.pk}/").content.decode()


def test_an_open_sweep_names_the_last_complete_one_and_a_closed_one_none(viewer):
    nodes = make_nodes(["n1", "n2"])
    done = make_sweep(nodes)
    make_sweep(nodes, status="cancelled")
    running = make_sweep(nodes, status="running", verdict="unknown")
    assert state(viewer, running)["last_complete"] == done.pk
    assert state(viewer, done)["last_complete"] is None
    page = viewer.get(f"/sweeps/{running.pk}/").content.decode()
    assert ">running</span>" in page and ">unknown</span>" not in page


def test_each_finding_carries_the_id_of_its_page(viewer):
    sweep = make_sweep(make_nodes(["n1", "n2"]), verdict="fail", findings=[("fail", "n1<->n2", "n1<->n2 failed")])
    (finding,) = state(viewer, sweep)["findings"]
    assert finding["id"] == Finding.objects.get(sweep=sweep).pk
    assert viewer.get(f"/sweeps/{sweep.pk}/findings/{finding['id']}/").status_code == 200
