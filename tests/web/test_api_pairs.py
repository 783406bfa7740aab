"""The API pages a sweep's pairs: a huge sweep's JSON carries one page and a link to the next."""

from __future__ import annotations

import pytest

from cluster_health.shapes import documents
from cluster_health.web import api
from tests.support.dashboard_rows import make_nodes, make_sweep

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("memory_channel_layer")]


@pytest.fixture
def sweep():
    return make_sweep(make_nodes([f"n{i}" for i in range(8)]))  # 28 pairs


def probes(pairs) -> list[int]:
    return [p["probe"] for p in pairs]


def test_a_sweeps_json_carries_one_page_of_pairs_and_a_link_to_the_next(viewer_client, sweep):
    data = viewer_client.get(f"/api/sweeps/{sweep.pk}?limit=10").json()
    assert len(data["pairs"]) == 10 and data["verdict"] == "pass"
    page = data["pairs_page"]
    assert page["total"] == 28 and page["offset"] == 0 and page["limit"] == 10
    assert page["next"] == f"http://testserver/api/sweeps/{sweep.pk}/pairs?offset=10&limit=10"


def test_following_the_next_links_yields_every_pair_once_in_round_order(viewer_client, sweep):
    data = viewer_client.get(f"/api/sweeps/{sweep.pk}?limit=10").json()
    seen, url = probes(data["pairs"]), data["pairs_page"]["next"]
    while url:
        page = viewer_client.get(url).json()
        assert page["sweep"] == sweep.pk and page["total"] == 28
        seen += probes(page["pairs"])
        url = page["next"]
    assert seen == probes(documents.sweep_json(sweep)["pairs"])  # what `manage.py sweep --json` prints


def test_the_last_page_has_no_next_link(viewer_client, sweep):
    page = viewer_client.get(f"/api/sweeps/{sweep.pk}/pairs?offset=20&limit=10").json()
    assert len(page["pairs"]) == 8 and page["next"] is None
    assert viewer_client.get(f"/api/sweeps/{sweep.pk}/pairs?offset=100").json()["pairs"] == []


def test_without_a_limit_a_huge_sweep_returns_only_the_default_page(viewer_client, sweep, monkeypatch):
    monkeypatch.setattr(api, "PAIRS_PAGE", 5)
    data = viewer_client.get(f"/api/sweeps/{sweep.pk}").json()
    assert len(data["pairs"]) == 5 and data["pairs_page"]["total"] == 28
    assert data["pairs_page"]["next"].endswith("offset=5&limit=5")


def test_the_full_sweep_json_of_the_cli_still_holds_every_pair(sweep):
    assert len(documents.sweep_json(sweep)["pairs"]) == 28


@pytest.mark.parametrize(
    "query",
    ["limit=ten", "offset=1.5", "limit=0", "offset=-1", f"limit={api.MAX_PAIRS_PAGE + 1}", "limit=%C2%B2"],
)
@pytest.mark.parametrize("path", ["", "/pairs"])
def test_a_paging_parameter_that_is_not_a_whole_number_in_range_is_a_400_naming_it(viewer_client, sweep, path, query):
    r = viewer_client.get(f"/api/sweeps/{sweep.pk}{path}?{query}")
    assert r.status_code == 400 and r.json()["error"].startswith(query.split("=")[0])


def test_the_pairs_of_a_missing_sweep_are_a_404(viewer_client):
    assert viewer_client.get("/api/sweeps/999999/pairs").status_code == 404
