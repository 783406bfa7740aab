"""Compare lists every pair its status-change view colours: a pair now slow is a regression, and a pair
that came back transient or contended is listed (and coloured) as such, not drawn "absent"."""

import json
import re

import pytest
from django.urls import reverse

from cluster_health.core import matrix
from tests.support.dashboard_rows import make_nodes, make_sweep, make_user

pytestmark = pytest.mark.django_db

SLOW = {"status": "degraded", "reason": "below_peers", "busbw_gbps": 0.5}
TIMEOUT = {"status": "timeout", "stage": "connect", "reason": "connect_timeout", "busbw_gbps": None}


def listed(html, heading):
    """The pairs of one list, as "a ↔ b: before → after"."""
    items = html[html.index(f"data-{heading}>") :].split("</ul>", 1)[0]
    return [re.sub(r"<[^>]+>", "", li) for li in re.findall(r"<li[^>]*>(.*?)</li>", items) if "↔" in li]


def test_a_slowed_pair_is_a_regression_and_a_transient_one_is_listed(client):
    client.force_login(make_user("viewer", operator=False))
    nodes = make_nodes(["c1", "c2", "c3", "c4"])
    before = make_sweep(nodes, {("c3", "c4"): {"status": "transient", "busbw_gbps": 2.0}})
    after = make_sweep(
        nodes,
        {
            ("c1", "c2"): SLOW,
            ("c1", "c3"): {"status": "transient", "reason": "collective_timeout", "busbw_gbps": 2.0},
            ("c2", "c3"): {"status": "contended", "busbw_gbps": 0.9},
            ("c3", "c4"): TIMEOUT,  # transient before: it worked on its second look, and now fails
        },
    )
    html = client.get(reverse("compare"), {"a": before.pk, "b": after.pk}).content.decode()
    assert listed(html, "regressed") == ["c1 ↔ c2: ok → degraded"]
    assert listed(html, "transient") == ["c1 ↔ c3: ok → transient", "c2 ↔ c3: ok → contended"]
    assert listed(html, "broke") == ["c3 ↔ c4: transient → timeout"]
    assert listed(html, "changed") == []

    diff = json.loads(client.get(reverse("compare-state"), {"a": before.pk, "b": after.pk}).content)
    codes = diff["diff_codes"]
    change = matrix.decode(diff["change"], "B")
    at = {name: i for i, name in enumerate(diff["nodes"])}
    drawn = {
        (a, b): codes[change[matrix.pair_index(at[a], at[b], len(at))]]
        for a, b in (("c1", "c2"), ("c1", "c3"), ("c2", "c3"), ("c3", "c4"), ("c1", "c4"))
    }
    assert drawn == {
        ("c1", "c2"): "regressed",
        ("c1", "c3"): "transient",
        ("c2", "c3"): "transient",
        ("c3", "c4"): "broke",
        ("c1", "c4"): "same",
    }
    # Every cell the view colours (not absent, not same) is in a list.
    coloured = sum(codes[c] not in ("absent", "same") for c in change)
    assert coloured == sum(len(diff[k]) for k in ("broke", "fixed", "changed", "regressed", "transient")) == 4

    report = client.get(reverse("sweep-report", args=[after.pk]), {"before": before.pk}).content.decode()
    assert listed(report, "regressed") == ["c1 ↔ c2: ok → degraded"]
    assert listed(report, "transient") == ["c1 ↔ c3: ok → transient", "c2 ↔ c3: ok → contended"]
