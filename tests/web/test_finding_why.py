"""A finding's "why" page reads its evidence chain as sentences, a confirmation record included."""

import re

import pytest

from cluster_health.models import Finding
from tests.support.dashboard_rows import make_nodes, make_sweep, make_user

pytestmark = pytest.mark.django_db

RECORD = {
    "outcome": "confirmed",
    "first": {"round": 3, "status": "timeout", "reason": "connect_timeout", "busbw_gbps": None},
    "again": {"round": 7, "status": "timeout", "reason": "connect_timeout", "busbw_gbps": None},
    "partners": [
        {"node": "host1", "partner": "host4", "status": "ok", "busbw_gbps": 0.42},
        {"node": "host2", "partner": "host6", "status": "ok", "busbw_gbps": 0.41},
    ],
    "culprit": "host1<->host2",
}


def test_a_confirmed_findings_chain_reads_as_sentences_not_a_dict(client):
    client.force_login(make_user("why", operator=False))
    sweep = make_sweep(make_nodes(["host1", "host2"]), verdict="fail")
    finding = Finding.objects.create(
        sweep=sweep,
        severity="info",
        code="confirmed",
        subject="host1<->host2",
        text="host1<->host2 timeout at connect in round 3: confirmed, host1<->host2",
        pairs=["host1<->host2"],
        detail={"evidence": [RECORD, {"peers_compared": 4, "reference": {"median_gbps": 0.42}}], "next_step": ""},
    )
    page = client.get(f"/sweeps/{sweep.pk}/findings/{finding.pk}/").content.decode()
    chain = re.search(r"<ol data-chain>(.*?)</ol>", page, re.S).group(1)
    assert "{" not in chain and "&#x27;outcome&#x27;" not in chain and "'outcome'" not in chain
    lines = re.findall(r"<li>(.*?)</li>", chain, re.S)
    assert lines[0] == (
        "Confirmation pass: confirmed. First look: timeout (connect_timeout) in round 3. "
        "Probed again: timeout (connect_timeout) in round 7. "
        "With healthy partners: host1 with host4: ok, 0.42 GB/s; host2 with host6: ok, 0.41 GB/s. "
        "Points at host1&lt;-&gt;host2."
    )
    assert lines[1] == "peers compared: 4; reference: (median gbps: 0.42)"
