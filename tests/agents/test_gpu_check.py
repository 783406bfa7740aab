"""The gpu check on a machine without a GPU: a real subprocess, a real torch, a named skip."""

import pytest

from agents import contract, gpu, gpu_contract
from agents.gpu_check import run_gpu_check
from tests.support.nvml_fake import FakeNvml

pytestmark = pytest.mark.timeout(90)


def command(**over) -> dict:
    return dict({"v": 1, "kind": "gpu", "probe_id": 7, "sweep_id": 3, "node": "cpu-1"}, **over)


def cuda_usable() -> bool:
    import subprocess
    import sys

    out = subprocess.run(
        [sys.executable, "-c", "import torch; print(torch.cuda.is_available())"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    return out.stdout.strip() == "True"


@pytest.fixture(scope="module")
def cpu_only():
    if cuda_usable():
        pytest.skip("this machine has a usable GPU: the CPU behaviour is not reachable here")


def test_it_skips_a_node_without_a_gpu_and_says_why(cpu_only):
    result = run_gpu_check(command(), nvml_facts=gpu.collect(FakeNvml.load("cpu_node")))
    assert result == gpu_contract.validate_result(result)
    assert (result["status"], result["stage"], result["reason"]) == ("skipped", "init", "no_gpu")
    assert "cpu-1 has no usable NVIDIA GPU (no NVML library (libnvidia-ml.so)" in result["hint"]
    assert "leave CPU nodes out of gpu sweeps" in result["hint"]
    assert result["devices"] == [] and result["versions"]["torch"]
    assert (result["probe_id"], result["sweep_id"], result["kind"]) == (7, 3, "gpu")


def test_gpus_that_torch_cannot_use_fail_as_backend_unavailable(cpu_only):
    result = run_gpu_check(command(), nvml_facts=gpu.collect(FakeNvml.load("h100_node")))
    assert (result["status"], result["reason"]) == ("failed", "backend_unavailable")
    assert result["hint"].startswith("NVML sees 8 GPU(s) on cpu-1 but torch cannot use CUDA")


def test_the_check_is_held_to_its_deadline(tmp_path, monkeypatch):
    # A node whose interpreter takes 3 s to start (a slow shared filesystem): every Python
    # started with this path imports this sitecustomize first, the check's child included.
    (tmp_path / "sitecustomize.py").write_text("import time\ntime.sleep(3.0)\n")
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    result = run_gpu_check(command(deadline_s=1.0), nvml_facts=gpu.collect(FakeNvml.load("cpu_node")))
    assert result["status"] == "timeout", result
    assert (result["stage"], result["reason"]) == ("init", "gpu_error")
    assert "stopped at its 1s deadline in stage init" in result["hint"]
    assert result["duration_s"] < 1.0 + 8.0


def test_a_malformed_command_is_refused_before_anything_runs():
    with pytest.raises(contract.ContractError, match="memory_fraction"):
        run_gpu_check(command(memory_fraction=1.5))
    with pytest.raises(contract.ContractError, match="timeouts.warmup: unknown stage"):
        gpu_contract.validate_command(command(timeouts={"warmup": 1}))


def test_the_result_contract_bounds_devices_and_requires_a_reason():
    with pytest.raises(contract.ContractError, match="reason: required when status is skipped"):
        gpu_contract.validate_result(
            {"v": 1, "kind": "gpu", "probe_id": 1, "node": "n0", "status": "skipped", "stage": "init"}
        )
    device = {"index": 0, "status": "ok", "stage": "copy", "bf16_tflops": -1}
    with pytest.raises(contract.ContractError, match=r"devices\[0\]\.bf16_tflops"):
        gpu_contract.validate_result(
            {"v": 1, "kind": "gpu", "probe_id": 1, "node": "n0", "status": "ok", "stage": "copy", "devices": [device]}
        )


def test_the_result_contract_checks_the_gpu_pair_matrix():
    base = {"v": 1, "kind": "gpu", "probe_id": 1, "node": "n0", "status": "ok", "stage": "pairs"}
    pair = {"src": 0, "dst": 1, "link": "nvlink", "nvlink_lanes": 18, "p2p": True, "p2p_gbps": 381.0}
    got = gpu_contract.validate_result({**base, "pairs": [pair]})["pairs"][0]
    assert (got["src"], got["dst"], got["link"], got["p2p"], got["p2p_gbps"], got["status"]) == (
        0,
        1,
        "nvlink",
        True,
        381.0,
        "ok",
    )
    for bad, match in (
        ({**pair, "dst": 0}, r"pairs\[0\]: src and dst are both GPU 0"),
        ({**pair, "link": "infiniband"}, r"pairs\[0\]\.link"),
        ({**pair, "p2p_gbps": -3}, r"pairs\[0\]\.p2p_gbps"),
    ):
        with pytest.raises(contract.ContractError, match=match):
            gpu_contract.validate_result({**base, "pairs": [bad]})
    with pytest.raises(contract.ContractError, match="at most 4032 GPU pairs"):
        gpu_contract.validate_result({**base, "pairs": [pair] * 4033})


def test_the_pcie_table_knows_what_a_link_carries():
    assert gpu_contract.pcie_gbps(5, 16) == 63.008
    assert gpu_contract.pcie_gbps(4, 8) == 15.752
    assert gpu_contract.pcie_gbps(None, 16) is None and gpu_contract.pcie_gbps(9, 16) is None


def test_the_agent_routes_a_gpu_command_to_the_check_and_reports_its_result(cpu_only):
    from agents.worker import Agent

    agent = Agent("cpu-1", "127.0.0.1", "redis://127.0.0.1:1/0")
    agent.facts = {"gpus": gpu.collect(FakeNvml.load("cpu_node"))}
    sent = []
    agent.send_result = sent.append  # the broker is not what this test is about
    result = agent.handle(command())
    assert sent == [result]
    assert (result["kind"], result["status"], result["reason"]) == ("gpu", "skipped", "no_gpu")
    assert agent.handle(command(expires_at=1.0)) is None and len(sent) == 1  # expired: dropped, as probes are
    # The server's outbox sent it again (a worker died between commit and mark): run once, not twice.
    assert agent.handle(command()) is None and len(sent) == 1
