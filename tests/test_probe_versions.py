"""Versions exchanged through the store: a difference is flagged for the server, naming the odd node."""

import time

from agents import contract
from agents.probe import Probe, StageLog
from tests.agent_fixtures import command


def probe_for(rank, tmp_path):
    spec = {
        "command": contract.validate_command(command(rank)),
        "rendezvous": {"kind": "manual"},
        "events_path": str(tmp_path / "stages.jsonl"),
        "result_path": str(tmp_path / "result.json"),
        "spawned_at": time.time(),
    }
    return Probe(spec, StageLog(spec["events_path"]))


def posted(node, torch="2.13.0+cpu", cuda=None, nccl=None):
    return {
        "node": node,
        "versions": {"torch": torch, "cuda": cuda, "nccl": nccl, "python": "3.11.7"},
        "init_problem": None,
        "candidates": [],
    }


def test_matching_versions_are_recorded_without_a_flag(tmp_path):
    probe = probe_for(0, tmp_path)
    probe.versions = posted("n0")["versions"]
    probe.compare_versions({0: posted("n0"), 1: posted("n1")})
    assert probe.peer_versions["node"] == "n1"
    assert "version_mismatch" not in probe.extra


def test_a_different_torch_or_nccl_is_flagged_with_the_peer_versions(tmp_path):
    probe = probe_for(1, tmp_path)
    probe.versions = posted("n1", cuda="12.4", nccl="2.21.5")["versions"]
    probe.compare_versions({0: posted("n0", cuda="12.4", nccl="2.19.3"), 1: posted("n1", cuda="12.4", nccl="2.21.5")})
    assert probe.extra["version_mismatch"] is True
    assert (probe.peer_versions["node"], probe.peer_versions["nccl"]) == ("n0", "2.19.3")
    assert "NCCL 2.21.5" in probe.version_text() and "NCCL 2.19.3" in probe.version_text()
