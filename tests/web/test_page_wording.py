"""What the header, the menu and the hang page say: when a sweep ended and how long ago, where "Nodes"
leads, and how many of a job's ranks were found, in words."""

import re
from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from cluster_health.models import HangDiagnosis, Sweep
from tests.support.dashboard_rows import make_nodes, make_sweep, make_user

pytestmark = pytest.mark.django_db

ENDED = re.compile(
    r'<span class="sweep-ended" data-sweep-ended>ended <time datetime="[^"]+">\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC</time>, '
    r'<time datetime="[^"]+" data-ago title="[^"]+">(\d+ min) ago</time></span>'
)


@pytest.fixture
def viewer(client):
    client.force_login(make_user("viewer", operator=False))
    return client


@pytest.fixture
def operator(client):
    client.force_login(make_user("operator", operator=True))
    return client


def test_the_sweep_page_and_overview_say_when_the_sweep_ended_and_how_long_ago(viewer):
    sweep = make_sweep(make_nodes(["e1", "e2"]))
    Sweep.objects.filter(pk=sweep.pk).update(finished=timezone.now() - timedelta(minutes=7))
    for url in (reverse("sweep", args=[sweep.pk]), reverse("overview")):
        html = viewer.get(url).content.decode()
        assert ENDED.search(html).group(1) == "7 min", url
    state = viewer.get(reverse("sweep-state", args=[sweep.pk])).json()
    assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC", state["finished_text"])  # for the live re-read

    running = make_sweep(make_nodes(["e3"]), status="running")
    html = viewer.get(reverse("sweep", args=[running.pk])).content.decode()
    assert "data-sweep-ended hidden></span>" in html and not ENDED.search(html)


def test_the_nodes_menu_opens_the_nodes_list(viewer):
    html = viewer.get(reverse("overview")).content.decode()
    nav = re.search(r"<nav[^>]*>(.*?)</nav>", html, re.S).group(1)
    assert re.search(r'<a href="([^"]+)">Nodes</a>', nav).group(1) == reverse("nodes") == "/nodes/"


@pytest.mark.parametrize(
    ("job", "said"),
    [
        ({"ranks_found": 0, "world_size": None, "nodes": []}, "No rank of the job found on any node in 3.1 s"),
        (
            {"ranks_found": 0, "world_size": 8, "nodes": ["g1"]},
            "No rank of the job found on g1 (it has 8 ranks) in 3.1 s",
        ),
        (
            {"ranks_found": 3, "world_size": None, "nodes": ["g1"]},
            "3 of an unknown number of ranks found on g1 in 3.1 s",
        ),
        ({"ranks_found": 4, "world_size": 4, "nodes": ["g1", "g2"]}, "4 of 4 ranks found on g1, g2 in 3.1 s"),
    ],
)
def test_the_hang_page_says_how_many_ranks_it_found_in_words(operator, job, said):
    diagnosis = HangDiagnosis.objects.create(
        master="10.0.0.1:29500",
        status="finished",
        verdict="unknown",
        result={"job": {"master": "10.0.0.1:29500", **job}, "verdict": "unknown", "seconds": 3.1, "culprits": []},
    )
    html = operator.get(reverse("hang", args=[diagnosis.pk])).content.decode()  # hang reports are operators'

    words = re.sub(r"<[^>]+>", "", re.search(r"<span data-hang-ranks>.*? s", html, re.S).group(0))
    assert words == said and "?" not in words
