"""manage.py topology infer / export --slurm: the groups a full sweep measured, and a topology.conf of them."""

import json

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from cluster_health.core import topology
from tests.support.racked_sweep import racked_sweep

pytestmark = pytest.mark.usefixtures("memory_channel_layer")


def test_infer_and_export_read_the_latest_full_sweep(db, driver, tmp_path, capsys):
    sweep = racked_sweep(driver, tmp_path)
    capsys.readouterr()
    call_command("topology", "infer", "--json")
    report = json.loads(capsys.readouterr().out)
    assert report["sweep"] == sweep.pk and report["answer"] == "groups"
    assert [(g["name"], g["nodes"], g["declared"]) for g in report["groups"]] == [
        ("rack-a", ["gpu01", "gpu02"], ["rack-a"]),
        ("rack-b", ["gpu03", "gpu04", "gpu05", "gpu06"], ["rack-a", "rack-b"]),
    ]
    assert all(c >= 0.9 for g in report["groups"] for c in g["confidence"].values())
    assert report["uplinks"] == []
    (wrong,) = report["mismatches"]
    assert (wrong["node"], wrong["declared"], wrong["measured"]) == ("gpu03", "rack-a", "rack-b")

    call_command("topology", "infer", "--sweep", str(sweep.pk))
    text = capsys.readouterr().out
    assert f"sweep {sweep.pk}: groups" in text and "gpu03 is labelled rack-a but measures with rack-b" in text

    out = tmp_path / "measured.conf"
    call_command("topology", "export", "--slurm", "--out", str(out))
    conf = out.read_text()
    assert "SwitchName=rack-a Nodes=gpu[01-02]\nSwitchName=rack-b Nodes=gpu[03-06]\n" in conf
    assert topology.parse(conf)["gpu03"] == "rack-b"  # what nodes topology FILE would declare
    call_command("topology", "export", "--slurm")
    assert capsys.readouterr().out == conf


def test_it_says_why_it_has_nothing_to_read(db, driver, tmp_path):
    with pytest.raises(CommandError, match="no finished full sweep yet"):
        call_command("topology", "infer")
    with pytest.raises(CommandError, match="sweep 999 does not exist"):
        call_command("topology", "infer", "--sweep", "999")
    with pytest.raises(CommandError, match="say the format: topology export --slurm"):
        call_command("topology", "export")
