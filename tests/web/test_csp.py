"""Content-Security-Policy: every page's inline scripts carry the response's own nonce; no other inline script runs."""

from __future__ import annotations

import re

import pytest

from tests.support.dashboard_rows import make_nodes, make_sweep

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("memory_channel_layer")]


def script_src(response) -> str:
    header = response["Content-Security-Policy"]
    (directive,) = [d.strip() for d in header.split(";") if d.strip().startswith("script-src ")]
    return directive


def nonce_of(response) -> str:
    (nonce,) = re.findall(r"'nonce-([^']+)'", script_src(response))
    return nonce


@pytest.fixture
def sweeps():
    nodes = make_nodes(["c0", "c1", "c2"])
    return make_sweep(nodes, kind="full"), make_sweep(nodes, kind="full")


@pytest.mark.parametrize(
    "url, scripts",
    [
        ("/", 2),
        ("/sweeps/{after}/", 1),
        ("/sweeps/compare/?a={before}&b={after}", 1),
        ("/sweeps/{after}/report/", 1),
        ("/pairs/c0/c1/", 0),
    ],
)
def test_every_inline_script_of_a_page_carries_the_responses_nonce(viewer_client, sweeps, url, scripts):
    before, after = sweeps
    response = viewer_client.get(url.format(before=before.pk, after=after.pk))
    assert response.status_code == 200
    assert "'unsafe-inline'" not in script_src(response) and "'unsafe-eval'" not in script_src(response)
    nonce = nonce_of(response)
    page = response.content.decode()
    inline = [a for a in re.findall(r"<script(?![^>]*\bsrc=)([^>]*)>", page) if "application/json" not in a]  # data
    assert len(inline) == scripts and all(f'nonce="{nonce}"' in attrs for attrs in inline), inline
    assert not re.search(r"\son[a-z]+=\"", page)  # no inline event handlers: the policy would refuse them


def test_each_response_gets_a_fresh_nonce(viewer_client, sweeps):
    first, second = viewer_client.get("/"), viewer_client.get("/")
    assert nonce_of(first) != nonce_of(second) and len(nonce_of(first)) >= 16


def test_the_policy_allows_websockets_only_to_this_server_and_no_framing(client):
    header = client.get("/accounts/login/")["Content-Security-Policy"]
    assert "connect-src 'self' ws://testserver" in header
    assert "frame-ancestors 'none'" in header and "object-src 'none'" in header and "base-uri 'none'" in header
