"""Whom a sweep's findings blame, on the namespace bed's six-host faults: the rules as the sweep runs them."""

from __future__ import annotations

from cluster_health.sweeps import findings
from tests.support.six_hosts import SIX, six_host_pairs


def blamed(found):
    return sorted((f["code"], f["subject"]) for f in found if f["severity"] == "fail")


def test_it_names_the_firewalled_link_and_the_offline_node_never_their_common_peer():
    found = findings._matrix_findings(SIX, six_host_pairs(), {"host5"}, {}, {})
    assert blamed(found) == [("link_failed", "host1<->host2"), ("node_offline", "host5")]
    assert ("slow_node", "host3") in [(f["code"], f["subject"]) for f in found]
    assert not [f for f in found if f["subject"] == "host2"]


def test_a_node_offline_when_the_sweep_was_planned_owns_its_pairs_too():
    found = findings._matrix_findings(SIX, six_host_pairs(), set(), {"host5": "last heartbeat 5 minutes ago"}, {})
    assert blamed(found) == [("link_failed", "host1<->host2"), ("node_offline", "host5")]
