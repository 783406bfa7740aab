"""Links trending down: drift findings to a short list in the sweep JSON, the text output and the sweep page."""

import pytest
from django.urls import reverse

from cluster_health.core import history, textmatrix
from cluster_health.models import Finding
from cluster_health.shapes import documents
from tests.support.dashboard_rows import make_nodes, make_sweep, make_user

FALLING = [1.0, 1.02, 0.98, 0.95, 0.9, 0.86, 0.8]


def drift(link: str, series: list[float]) -> dict:
    """The drift finding history.link_findings makes for a link falling along ``series``."""
    found = [f for f in history.link_findings(link, ["ok"] * len(series), series) if f["code"] == "drift"]
    assert found, series
    return found[0]


def test_each_drift_finding_gives_its_link_with_busbw_then_and_now():
    out = history.trending_down([drift("a<->b", FALLING)])
    assert out == [{"link": "a<->b", "from_busbw_gbps": 1.0, "to_busbw_gbps": 0.8, "sweeps": 7}]


def test_other_findings_are_left_out_and_the_steepest_fall_comes_first():
    flapping = history.link_findings("c<->d", ["ok", "timeout", "ok", "timeout", "ok"], [])
    assert flapping and flapping[0]["code"] == "flapping"
    steep = drift("e<->f", [2.0, 2.0, 2.0, 1.6, 1.4, 1.2, 1.0])
    out = history.trending_down([drift("a<->b", FALLING), *flapping, steep])
    assert [t["link"] for t in out] == ["e<->f", "a<->b"]
    assert out[0]["from_busbw_gbps"] == 2.0 and out[0]["to_busbw_gbps"] == 1.0


def test_a_drift_finding_without_its_series_is_skipped():
    assert history.trending_down([{"code": "drift", "subject": "a<->b", "detail": {}}]) == []
    assert history.trending_down([{"code": "drift", "subject": "a<->b"}]) == []
    assert history.trending_down([]) == []


def test_the_text_output_lists_the_links_trending_down():
    report = {
        "sweep": 7,
        "kind": "full",
        "backend": "gloo",
        "status": "finished",
        "verdict": "warn",
        "nodes": ["a", "b"],
        "pairs": [],
        "trending_down": history.trending_down([drift("a<->b", FALLING)]),
    }
    lines = textmatrix.render(report).splitlines()
    at = lines.index("trending down:")
    assert lines[at + 1] == "  a<->b: busbw 1 -> 0.8 GB/s over 7 sweeps"
    assert "trending down:" not in textmatrix.render(dict(report, trending_down=[]))


@pytest.mark.django_db
def test_the_sweep_json_and_page_carry_the_links_trending_down(client):
    nodes = make_nodes(["a", "b", "c"])
    sweep = make_sweep(nodes, verdict="warn")
    Finding.objects.create(sweep=sweep, **drift("a<->b", FALLING))
    report = documents.sweep_json(sweep)
    assert report["trending_down"] == [{"link": "a<->b", "from_busbw_gbps": 1.0, "to_busbw_gbps": 0.8, "sweeps": 7}]
    client.force_login(make_user("viewer", operator=False))
    page = client.get(reverse("sweep", args=[sweep.pk])).content.decode()
    assert "Trending down" in page and "1.000 → 0.800 GB/s over 7 sweeps" in page


@pytest.mark.django_db
def test_a_sweep_without_drift_has_an_empty_list_and_a_hidden_section(client):
    sweep = make_sweep(make_nodes(["a", "b"]))
    assert documents.sweep_json(sweep)["trending_down"] == []
    client.force_login(make_user("viewer", operator=False))
    page = client.get(reverse("sweep", args=[sweep.pk])).content.decode()
    assert "data-trending-section hidden" in page
