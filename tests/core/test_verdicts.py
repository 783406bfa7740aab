"""Verdicts and culprits (pure)."""

from cluster_health.core import rehearsal, verdicts


def pairs_with(bad, nodes=("n0", "n1", "n2", "n3"), status="failed"):
    out = []
    for i, a in enumerate(nodes):
        for b in nodes[i + 1 :]:
            broken = any(x in (a, b) for x in bad) if isinstance(bad, set) else {a, b} == set(bad)
            out.append(
                {
                    "a": a,
                    "b": b,
                    "status": status if broken else "ok",
                    "stage": "connect",
                    "reason": "refused" if broken else None,
                    "hint": None,
                }
            )
    return out


def test_it_maps_statuses_and_findings_to_a_verdict():
    assert verdicts.verdict(["ok", "ok"], []) == "pass"
    assert verdicts.verdict(["ok", "degraded"], []) == "warn"
    assert verdicts.verdict(["ok"], [{"severity": "warn"}]) == "warn"
    assert verdicts.verdict(["ok", "timeout"], []) == "fail"
    assert verdicts.verdict(["skipped"], []) == "unknown"
    assert verdicts.verdict([], []) == "unknown"


def test_it_blames_a_node_not_its_links():
    found = verdicts.culprit_findings(["n0", "n1", "n2", "n3"], pairs_with({"n1"}))
    assert [(f["code"], f["subject"]) for f in found] == [("node_unreachable", "n1")]


def test_it_blames_a_single_link():
    found = verdicts.culprit_findings(["n0", "n1", "n2", "n3"], pairs_with(("n0", "n2")))
    assert [(f["code"], f["subject"]) for f in found] == [("link_failed", "n0<->n2")]


def test_it_blames_an_offline_node_even_if_some_of_its_pairs_passed():
    pairs = pairs_with({"n3"}, status="offline")
    pairs[2]["status"] = "ok"  # n0-n3 ran before n3 went away
    found = verdicts.culprit_findings(["n0", "n1", "n2", "n3"], pairs, offline_nodes={"n3"})
    assert [(f["code"], f["subject"]) for f in found] == [("node_offline", "n3")]


def test_it_finds_an_interface_variable_naming_a_missing_nic():
    facts = {
        "n0": {"interfaces": [{"name": "lo"}, {"name": "eth0"}]},
        "n1": {"interfaces": [{"name": "lo"}, {"name": "ens5"}]},
    }
    found = rehearsal.setting_findings({"master": "n0", "env": {"GLOO_SOCKET_IFNAME": "eth"}}, facts)
    assert [(f["code"], f["subject"]) for f in found] == [("interface_missing", "n1")]
    assert rehearsal.ifname_matches("^lo", ["lo", "ens5"])
    assert not rehearsal.ifname_matches("=eth", ["eth0"])


def test_it_names_the_ranks_that_would_hang():
    halves = {
        "0": {"node": "m", "status": "failed", "stage": "store", "reason": "port_in_use", "hint": "taken"},
        "1": {"node": "w", "status": "timeout", "stage": "store", "reason": "store_timeout"},
    }
    found = rehearsal.rank_findings(["m", "w", "x"], halves, "timeout", "probe_crashed", None)
    assert [f["subject"] for f in found] == ["m", "w", "x"]
    assert "the master (m) would hang at store (port_in_use)" in found[0]["text"]
