"""Node consistency: the table (odd values are the ones most nodes do not have) and the findings."""

from cluster_health.core import consistency


def facts(torch="2.13.0", nccl="2.21.5", loopback=False, env=None):
    return {
        "versions": {
            "torch": torch,
            "nccl": nccl,
            "cuda": "12.4",
            "driver": "550.54",
            "python": "3.11",
            "gpu_count": 8,
        },
        "host": {"loopback": loopback},
        "env": env or {},
    }


def cell(table, node, column):
    row = next(r for r in table["rows"] if r["node"] == node)
    return next(c for c in row["cells"] if c["column"] == column)


def test_it_flags_the_node_with_a_different_nccl():
    t = consistency.table({"n1": facts(), "n2": facts(), "n3": facts(nccl="2.18.1")})
    assert cell(t, "n3", "NCCL") == {"column": "NCCL", "value": "2.18.1", "odd": True}
    assert not cell(t, "n1", "NCCL")["odd"]
    assert t["odd_columns"] == ["NCCL"]


def test_it_flags_a_hostname_resolving_to_loopback_even_on_every_node():
    t = consistency.table({"n1": facts(loopback=True), "n2": facts(loopback=True)})
    assert cell(t, "n1", consistency.LOOPBACK_COLUMN)["odd"] and cell(t, "n2", consistency.LOOPBACK_COLUMN)["odd"]


def test_it_gives_each_launch_variable_a_column_and_flags_where_it_is_missing():
    t = consistency.table(
        {"n1": facts(env={"NCCL_SOCKET_IFNAME": "ib0"}), "n2": facts(env={"NCCL_SOCKET_IFNAME": "ib0"}), "n3": facts()}
    )
    assert "NCCL_SOCKET_IFNAME" in t["columns"]
    assert cell(t, "n3", "NCCL_SOCKET_IFNAME") == {"column": "NCCL_SOCKET_IFNAME", "value": "–", "odd": True}


def test_it_flags_the_odd_node_out():
    facts = {
        f"n{i}": {"versions": {"torch": "2.4.0", "nccl": "2.20"}, "env": {"NCCL_IB_DISABLE": "1"}} for i in range(4)
    }
    facts["n2"] = {"versions": {"torch": "2.4.0", "nccl": "2.18"}, "env": {}}
    found = consistency.findings(facts)
    assert [(f["code"], f["subject"]) for f in found] == [("version_mismatch", "n2"), ("launch_env_mismatch", "n2")]
    assert "2.18 on n2" in found[0]["text"]


def test_it_warns_about_a_hostname_on_loopback_only_when_peers_use_another_address():
    facts = {"n0": {"host": {"hostname": "n0", "resolves_to": ["127.0.1.1"]}}}
    assert consistency.findings(facts, {"n0": "10.0.0.5"})[0]["code"] == "hostname_loopback"
    assert consistency.findings(facts, {"n0": "127.0.0.1"}) == []
