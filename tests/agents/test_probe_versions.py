"""Versions exchanged through the store: a difference is flagged for the server, naming the odd node."""

from tests.support.agent_fixtures import probe_in


def posted(node, torch="2.13.0+cpu", cuda=None, nccl=None):
    return {
        "node": node,
        "versions": {"torch": torch, "cuda": cuda, "nccl": nccl, "python": "3.11.7"},
        "init_problem": None,
        "candidates": [],
    }


def test_matching_versions_are_recorded_without_a_flag(tmp_path):
    probe = probe_in(tmp_path, 0)
    probe.versions = posted("n0")["versions"]
    probe.compare_versions({0: posted("n0"), 1: posted("n1")})
    assert probe.peer_versions["node"] == "n1"
    assert "version_mismatch" not in probe.extra


def test_a_different_torch_or_nccl_is_flagged_with_the_peer_versions(tmp_path):
    probe = probe_in(tmp_path, 1)
    probe.versions = posted("n1", cuda="12.4", nccl="2.21.5")["versions"]
    probe.compare_versions({0: posted("n0", cuda="12.4", nccl="2.19.3"), 1: posted("n1", cuda="12.4", nccl="2.21.5")})
    assert probe.extra["version_mismatch"] is True
    assert (probe.peer_versions["node"], probe.peer_versions["nccl"]) == ("n0", "2.19.3")
    assert "NCCL 2.21.5" in probe.version_text() and "NCCL 2.19.3" in probe.version_text()
