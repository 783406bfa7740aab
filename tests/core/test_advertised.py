"""An advertised address the peers cannot reach (cluster_health.core.advertised): pure, no database."""

from itertools import combinations

from cluster_health.core import advertised, culprits, verdicts
from tests.support.advertised_pairs import NODES, PORT, UNREACHABLE, facts_of, interface, probe
from tests.support.advertised_pairs import advertising as sweep

REFUSED = ("failed", "connect", "refused")


def facts(**second):
    return {n: facts_of(n, second.get(n)) for n in NODES}


def codes(found):
    return [(f["code"], f["subject"]) for f in found]


def sweep_findings(addresses, all_facts, pairs):
    """What sweeps/findings.py makes of the pairs: the matrix rules, then the addresses named."""
    inferred = culprits.infer(NODES, pairs)
    explained = culprits.explained_pairs(inferred)
    per_node = [
        f
        for f in verdicts.culprit_findings(NODES, pairs)
        if not (f["code"] == "link_failed" and f["subject"] in explained)
    ]
    return advertised.name_unroutable(per_node + inferred, pairs, addresses, all_facts)


def test_it_names_an_address_on_a_dead_second_nic_with_the_address_that_works():
    # n2 hosts the store for n3 and n4 (rank 0), which dial 10.9.0.2 on its dead eth1; it dials n1 from eth0.
    addresses, pairs = sweep("n2", "10.9.0.2")
    found = advertised.unroutable_addresses(addresses, facts(n2="10.9.0.2"), pairs)
    assert codes(found) == [("unroutable_address", "n2")]
    f = found[0]
    assert f["severity"] == "fail" and sorted(f["pairs"]) == ["n2<->n3", "n2<->n4"]
    assert "n2's advertised address 10.9.0.2 (eth1) is unreachable from its peers (2 of 2 failed on it: " in f["text"]
    assert "n3 failed at connect (unreachable), n4 failed at connect (unreachable)" in f["text"], f["text"]
    assert "n2 connects out fine from eth0 (10.0.0.2) (to n1)" in f["text"], f["text"]
    assert "--address 10.0.0.2 (or CLUSTER_HEALTH_NODE_ADDRESS=10.0.0.2)" in f["text"], f["text"]
    assert "GLOO_SOCKET_IFNAME=eth0 NCCL_SOCKET_IFNAME=eth0" in f["detail"]["next_step"]
    detail = f["detail"]
    assert (detail["address"], detail["interface"]) == ("10.9.0.2", "eth1")
    assert (detail["working_address"], detail["working_interface"]) == ("10.0.0.2", "eth0")
    assert [(p["node"], p["stage"], p["reason"]) for p in detail["peers"]] == [
        ("n3", "connect", "unreachable"),
        ("n4", "connect", "unreachable"),
    ]
    assert "n3 -> n2 at 10.9.0.2: failed at connect (unreachable)" in detail["evidence"]


def test_it_takes_the_place_of_the_inbound_blocked_finding_for_the_same_pairs():
    addresses, pairs = sweep("n2", "10.9.0.2", how=("timeout", "connect", "connect_timeout"))
    assert codes(culprits.infer(NODES, pairs)) == [("inbound_blocked", "n2")]  # what it read before
    found = sweep_findings(addresses, facts(n2="10.9.0.2"), pairs)
    assert codes(found) == [("unroutable_address", "n2")], found


def test_a_firewall_on_the_address_the_node_connects_out_from_stays_inbound_blocked():
    addresses, pairs = sweep("n2", "10.0.0.2", how=("timeout", "connect", "connect_timeout"))
    assert advertised.unroutable_addresses(addresses, facts(n2="10.9.0.2"), pairs) == []
    assert codes(sweep_findings(addresses, facts(n2="10.9.0.2"), pairs)) == [("inbound_blocked", "n2")]


def test_it_names_a_loopback_address_each_peer_dialled_on_its_own_host():
    addresses, pairs = sweep("n2", "127.0.0.1", how=REFUSED)
    found = sweep_findings(addresses, facts(), pairs)
    assert codes(found) == [("unroutable_address", "n2")], found
    text = found[0]["text"]
    assert "n2's advertised address 127.0.0.1 (lo) is unreachable from its peers" in text, text
    assert "it is a loopback address, so each peer dialled its own host" in text, text
    assert "--address 10.0.0.2" in text, text


def test_it_names_a_name_that_resolves_to_loopback_on_the_node_itself():
    # Registered by name: the peers resolve n2 to 10.0.0.2, n2 itself to 127.0.1.1 and binds its store there.
    addresses, pairs = sweep("n2", "n2", how=REFUSED, bound="127.0.1.1")
    for p in pairs:  # what the peers dialled: the name as their hosts files resolve it
        if p["a"] == "n2":
            p["evidence"]["b"]["store"]["address"] = f"10.0.0.2:{PORT}"
    found = advertised.unroutable_addresses(addresses, facts(), pairs)
    assert codes(found) == [("unroutable_address", "n2")]
    text = found[0]["text"]
    said = "it resolves on n2 to 127.0.1.1 (loopback), where its store listened while its peers dialled 10.0.0.2"
    assert said in text, text
    assert "--address 10.0.0.2" in text, text


def test_it_names_its_own_name_resolving_to_loopback_where_it_would_not_bind_it():
    # n2 advertises its hostname, which its hosts file maps to 127.0.1.1: not an address lo carries here,
    # so n2 refused to bind it (interface_missing) before any peer dialled.
    addresses, pairs = sweep("n2", "n2", how=("failed", "resolve", "interface_missing"))
    for p in pairs:
        if p["a"] == "n2":
            p["evidence"] = None
    known = facts()
    known["n2"]["host"] = {"hostname": "n2", "resolves_to": ["127.0.1.1"], "loopback": True}
    found = advertised.unroutable_addresses(addresses, known, pairs)
    assert codes(found) == [("unroutable_address", "n2")]
    text = found[0]["text"]
    assert "(2 of 2 failed on it: n2 itself failed at resolve (interface_missing) with n3, n2 itself" in text, text
    assert ": it resolves on n2 to 127.0.1.1 (loopback). Fix: start n2's agent with --address 10.0.0.2" in text, text


def test_it_names_an_address_the_node_does_not_have():
    addresses, pairs = sweep("n2", "10.0.0.99", how=("failed", "resolve", "interface_missing"))
    for p in pairs:
        if p["a"] == "n2":
            p["evidence"] = None  # n2 refused to bind before anyone dialled
    found = sweep_findings(addresses, facts(), pairs)
    assert codes(found) == [("unroutable_address", "n2")], found
    text = found[0]["text"]
    assert "n2 itself failed at resolve (interface_missing) with n3" in text, text
    assert "it is not an address of n2 (it has 10.0.0.2)" in text and "--address 10.0.0.2" in text, text


def test_it_names_an_address_on_a_down_interface():
    addresses, pairs = sweep("n2", "10.9.0.2")
    down = facts()
    down["n2"]["interfaces"].append(interface("eth1", "10.9.0.2", up=False))
    found = advertised.unroutable_addresses(addresses, down, pairs)
    assert "it is on eth1, which is down" in found[0]["text"], found[0]["text"]


def test_a_node_that_hosts_every_pair_gets_the_address_on_its_peers_network_from_its_facts():
    # n1 is rank 0 in all its pairs: no connection of its own out, so its facts say which address is on
    # its peers' network; the finding replaces "every pair with n1 failed".
    addresses, pairs = sweep("n1", "10.9.0.1")
    assert ("node_unreachable", "n1") in codes(verdicts.culprit_findings(NODES, pairs))
    found = sweep_findings(addresses, facts(n1="10.9.0.1"), pairs)
    assert codes(found) == [("unroutable_address", "n1")], found
    f = found[0]
    assert "(3 of 3 failed on it: n2 failed at connect (unreachable)" in f["text"], f["text"]
    assert "it is on eth1, off its peers' network, while its eth0 (10.0.0.1) is on it" in f["text"], f["text"]
    assert (f["detail"]["working_address"], f["detail"]["working_interface"]) == ("10.0.0.1", "eth0")


def test_a_single_failed_pair_is_named_instead_of_a_failed_link():
    # n3 hosts the store only for n4; it dials n1 and n2 from eth0.
    addresses, pairs = sweep("n3", "10.9.0.3")
    assert ("link_failed", "n3<->n4") in codes(verdicts.culprit_findings(NODES, pairs))
    found = sweep_findings(addresses, facts(n3="10.9.0.3"), pairs)
    assert codes(found) == [("unroutable_address", "n3")], found
    assert "n3 connects out fine from eth0 (10.0.0.3) (to n1, n2)" in found[0]["text"]


def test_nothing_is_named_where_a_peer_reached_the_address():
    addresses, pairs = sweep("n2", "10.9.0.2")
    n24 = next(p for p in pairs if (p["a"], p["b"]) == ("n2", "n4"))
    n24.update(status="ok", stage="collective", reason=None)
    assert advertised.unroutable_addresses(addresses, facts(n2="10.9.0.2"), pairs) == []


def test_a_pair_fine_when_probed_again_names_nothing():
    addresses, pairs = sweep("n2", "10.9.0.2")
    pairs[-2]["status"] = "transient"  # n2<->n4, failed once, fine the second time
    assert (pairs[-2]["a"], pairs[-2]["b"]) == ("n2", "n4")
    assert advertised.unroutable_addresses(addresses, facts(n2="10.9.0.2"), pairs) == []


def test_nothing_is_named_where_the_peers_fail_with_everyone():
    addresses, pairs = sweep("n2", "10.9.0.2")
    for p in pairs:
        if "n3" in (p["a"], p["b"]):
            p.update(status="failed", stage="connect", reason="unreachable")
    assert advertised.unroutable_addresses(addresses, facts(n2="10.9.0.2"), pairs) == []


def test_without_facts_a_second_interface_is_not_guessed():
    addresses, pairs = sweep("n2", "10.9.0.2")
    assert advertised.unroutable_addresses(addresses, {}, pairs) == []
    assert codes(sweep_findings(addresses, {}, pairs)) == [("inbound_blocked", "n2")]


def test_the_loopback_agents_of_one_machine_are_left_alone_even_when_a_pair_fails():
    nodes = ["n1", "n2", "n3", "n4"]
    addresses = {n: "127.0.0.1" for n in nodes}
    pairs = [probe(a, b, addresses, REFUSED if a == "n2" else None) for a, b in combinations(nodes, 2)]
    assert advertised.unroutable_addresses(addresses, {n: facts_of(n) for n in nodes}, pairs) == []


def test_a_large_fleet_lists_the_first_peers_and_counts_the_rest():
    nodes = [f"n{i}" for i in range(1, 21)]
    addresses = {n: f"10.0.0.{n[1:]}" for n in nodes}
    addresses["n2"] = "10.9.0.2"
    pairs = [probe(a, b, addresses, UNREACHABLE if a == "n2" else None) for a, b in combinations(nodes, 2)]
    found = advertised.unroutable_addresses(addresses, {"n2": facts_of("n2", "10.9.0.2")}, pairs)
    assert len(found[0]["pairs"]) == 18 and "(18 of 18 failed on it: n3 failed at connect" in found[0]["text"]
    assert "n14 failed at connect (unreachable) and 6 more): it is on eth1" in found[0]["text"], found[0]["text"]
