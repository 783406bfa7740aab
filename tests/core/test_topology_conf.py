"""A Slurm topology.conf read in as the declared topology (nodes topology FILE), and one written back."""

import pytest

from cluster_health.core import topology

CONF = """\
# two leaves under one spine
SwitchName=rack-07 Nodes=gpu[001-003,007] LinkSpeed=100
SwitchName=rack-09 Nodes=gpu[004-006],login1
SwitchName=spine Switches=rack-[07,09]
"""


def test_a_topology_conf_gives_each_node_its_leaf_switch():
    assert topology.is_slurm(CONF) and not topology.is_slurm("rack-a: n1 n2\n")
    assert topology.parse(CONF) == {
        "gpu001": "rack-07",
        "gpu002": "rack-07",
        "gpu003": "rack-07",
        "gpu007": "rack-07",
        "gpu004": "rack-09",
        "gpu005": "rack-09",
        "gpu006": "rack-09",
        "login1": "rack-09",
    }


def test_hostlists_expand_and_compress():
    assert topology.expand_hostlist("r[1-2]n[08-09],x") == ["r1n08", "r1n09", "r2n08", "r2n09", "x"]
    names = ["gpu001", "gpu002", "gpu003", "gpu007", "gpu010", "login1"]
    assert topology.compress_hostlist(names) == "gpu[001-003,007,010],login1"
    assert topology.expand_hostlist(topology.compress_hostlist(names)) == names


@pytest.mark.parametrize(
    "text, error",
    [
        ("SwitchName=s1 Nodes=n[1-2]\nSwitchName=s2 Nodes=n2\n", "line 2: n2 is on both s1 and s2"),
        ("SwitchName=s1 Nodes=n[3-1]\n", "line 1: hostlist 'n[3-1]': range '3-1' runs backwards"),
        ("SwitchName=s1 Nodes=n[1-2\n", "line 1: hostlist 'n[1-2': '[' without ']'"),
        ("SwitchName=s1 Nodes=n[a-b]\n", "is not a number or a range"),
        ("SwitchName=s1 Nodes=n[1-9999999]\n", "names more than 100000 nodes"),
        ("SwitchName=spine Switches=s[1-2]\n", "names no node"),
        ("SwitchName=s1 Nodes=n1\nBlockName=b1 Nodes=n2\n", "line 2: a block topology (topology/block) is not read"),
        ("SwitchName=bad/name Nodes=n1\n", "line 1: bad group 'bad/name'"),
        ("SwitchName=s1 Nodes=n1 oops\n", "line 1: expected KEY=VALUE settings, got 'oops'"),
    ],
)
def test_a_bad_topology_conf_says_which_line_and_why(text, error):
    with pytest.raises(topology.TopologyError) as caught:
        topology.parse(text)
    assert error in str(caught.value)


def test_a_written_topology_conf_reads_back_the_same_groups():
    groups = [("rack-07", ["gpu001", "gpu002", "gpu003"]), ("spine", ["gpu004", "gpu005"])]
    text = topology.slurm_conf(groups, note="from sweep 4")
    assert text.splitlines() == [
        "# from sweep 4",
        "SwitchName=rack-07 Nodes=gpu[001-003]",
        "SwitchName=spine Nodes=gpu[004-005]",
        "SwitchName=spine-top Switches=rack-07,spine",
    ]
    assert topology.parse(text) == {n: g for g, members in groups for n in members}
