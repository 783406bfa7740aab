"""Declared topology: operators give nodes a group (rack, leaf, rail), and culprits are blamed on group pairs by it."""

import json
import re

import pytest
from django.core.exceptions import ValidationError
from django.core.management import call_command
from django.core.management.base import CommandError

from cluster_health.core import topology
from cluster_health.models import Finding, Node
from devtools.sweep_driver import heartbeat, result_for

NODES = ["alpha", "kilo", "mike", "zulu"]  # names no hostname pattern groups as they are cabled
TOPOLOGY = """\
# leaf switches of row 7
row7:leaf-a: alpha zulu
row7:leaf-b: mike, kilo
"""


def groups():
    return dict(Node.objects.values_list("name", "topology_group"))


def test_it_reads_a_topology_file_into_each_nodes_group():
    assert topology.parse(TOPOLOGY + "row7:leaf-a: gpu-9\n") == {
        "alpha": "row7:leaf-a",
        "zulu": "row7:leaf-a",
        "mike": "row7:leaf-b",
        "kilo": "row7:leaf-b",
        "gpu-9": "row7:leaf-a",
    }


@pytest.mark.parametrize(
    "text, error",
    [
        ("rack a: n1\n", "line 1: bad group 'rack a'"),
        ("# racks\nrack-a:n1\n", "line 2: expected 'GROUP: NODE [NODE ...]'"),
        ("x" * 65 + ": n1\n", "a group is 1 to 64 letters, digits"),
        ("rack-a: n1\nrack-b: n2 n1\n", "line 2: n1 is in both rack-a and rack-b"),
        ("# nothing yet\n", "the file names no node"),
    ],
)
def test_it_rejects_a_malformed_topology_file_saying_where(text, error):
    with pytest.raises(topology.TopologyError, match=re.escape(error)):
        topology.parse(text)


@pytest.fixture
def fleet(db):
    for name in NODES:
        heartbeat(name)


@pytest.fixture
def topology_file(tmp_path):
    path = tmp_path / "topology.txt"
    path.write_text(TOPOLOGY)
    return str(path)


def test_its_nodes_command_labels_and_unlabels_nodes_and_shows_the_group_as_json(fleet, capsys):
    call_command("nodes", "label", "rack:7", "alpha", "kilo")
    assert capsys.readouterr().out.splitlines() == ["alpha: rack:7", "kilo: rack:7"]
    call_command("nodes", "unlabel", "kilo")
    assert capsys.readouterr().out == "kilo: no declared group\n"
    assert groups() == {"alpha": "rack:7", "kilo": "", "mike": "", "zulu": ""}
    call_command("nodes", "--json")
    rows = {n["name"]: n for n in json.loads(capsys.readouterr().out)["nodes"]}
    assert rows["alpha"]["topology_group"] == "rack:7" and rows["kilo"]["topology_group"] is None
    call_command("nodes")
    assert "group rack:7" in next(line for line in capsys.readouterr().out.splitlines() if line.startswith("alpha"))


def test_its_nodes_command_refuses_a_bad_label_or_an_unknown_node_and_changes_nothing(fleet):
    with pytest.raises(CommandError, match=r"unknown node\(s\): nope; nothing changed"):
        call_command("nodes", "label", "rack-1", "alpha", "nope")
    with pytest.raises(CommandError, match="bad group 'rack 1'"):
        call_command("nodes", "label", "rack 1", "alpha")
    with pytest.raises(CommandError, match="usage: nodes label GROUP NAME"):
        call_command("nodes", "label", "rack-1")
    assert set(groups().values()) == {""}


def test_its_nodes_command_declares_the_topology_from_a_file_and_clears_the_nodes_it_leaves_out(
    fleet, topology_file, capsys
):
    heartbeat("spare")
    call_command("nodes", "label", "old-rack", "spare", "alpha")
    call_command("nodes", "topology", topology_file, "--json")
    captured = capsys.readouterr()
    assert {n["name"]: n["topology_group"] for n in json.loads(captured.out.splitlines()[-1])["nodes"]} == {
        "alpha": "row7:leaf-a",
        "kilo": "row7:leaf-b",
        "mike": "row7:leaf-b",
        "zulu": "row7:leaf-a",
    }
    assert "declared 4 node(s) in 2 group(s); cleared the group of 1 node(s) the file does not list" in captured.err
    assert groups()["spare"] == ""


def test_its_nodes_command_applies_no_part_of_a_topology_file_with_an_unknown_node_or_a_bad_line(fleet, tmp_path):
    call_command("nodes", "label", "old-rack", "alpha", "mike")
    before = groups()
    for name, extra_line, refusal in (
        ("unknown.txt", "row7:leaf-b: gpu-404", r"unknown node\(s\): gpu-404; nothing changed"),
        ("bad.txt", "leaf c: kilo", r"bad.txt: line 4: bad group 'leaf c'.*; nothing changed"),
    ):
        path = tmp_path / name
        path.write_text(f"{TOPOLOGY}{extra_line}\n")
        with pytest.raises(CommandError, match=refusal):
            call_command("nodes", "topology", str(path))
    with pytest.raises(CommandError, match="cannot read"):
        call_command("nodes", "topology", str(tmp_path / "missing.txt"))
    assert groups() == before


@pytest.mark.usefixtures("memory_channel_layer")
def test_it_blames_a_sweeps_failures_on_the_declared_group_pair_they_cross(fleet, topology_file, driver):
    call_command("nodes", "topology", topology_file)
    declared = groups()
    sweep = driver.sweep(kind="connectivity")

    def answer(cmd):
        members = [cmd["node"], *(p["name"] for p in cmd["peers"])]
        if cmd["kind"] == "pair" and declared[members[0]] != declared[members[1]]:
            return result_for(cmd, status="timeout", stage="connect", reason="connect_timeout")
        return result_for(cmd)

    driver.answer_all(answer)
    found = Finding.objects.get(sweep=sweep, code="segment")
    assert found.subject == "row7:leaf-a<->row7:leaf-b" and found.severity == "fail"
    assert "groups from the declared topology" in found.text
    assert not Finding.objects.filter(sweep=sweep, code="link_failed").exists()  # the segment explains them


def test_the_node_page_and_the_admin_show_its_declared_group(fleet, admin_client):
    call_command("nodes", "label", "row7:leaf-a", "alpha")
    assert "<b data-topology-group>row7:leaf-a</b> (declared topology)" in admin_client.get("/nodes/alpha/").text
    listed = admin_client.get("/admin/cluster_health/node/", {"topology_group": "row7:leaf-a"}).text
    assert "/admin/cluster_health/node/" in listed and ">alpha<" in listed and ">kilo<" not in listed
    node = Node.objects.get(name="kilo")
    node.topology_group = "leaf b"  # what the admin's form would save, validated as the command does
    with pytest.raises(ValidationError, match="a topology group is 1 to 64 letters"):
        node.full_clean()
