"""On a GPU node only (`scripts/test --gpu`): NVML, the gpu check, and NCCL on a real GPU.

Everywhere else these are skipped, saying why. Nothing here is faked: the
recorded-NVML and CPU tests are in test_gpu_facts, test_gpu_check and test_nccl_errors.
"""

import json
import subprocess
import sys
import textwrap

import pytest

from agents import gpu, gpu_contract
from agents.gpu_check import run_gpu_check
from tests.support.agent_fixtures import pair

pytestmark = [pytest.mark.gpu, pytest.mark.timeout(300)]


@pytest.fixture(scope="module", autouse=True)
def cuda():
    """torch's view of CUDA, asked in a child (this test process never initialises CUDA)."""
    probe = (
        "import json, torch; print(json.dumps([torch.__version__, torch.version.cuda, torch.cuda.is_available(), "
        "torch.cuda.device_count() if torch.cuda.is_available() else 0]))"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    try:
        version, built, available, count = json.loads(out.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        pytest.skip(f"torch could not be imported to ask about CUDA: {out.stderr[-300:]}")
    if not available:
        pytest.skip(
            f"torch.cuda.is_available() is false here (torch {version}, CUDA {built or 'not built in'}): "
            "these tests need an NVIDIA GPU and a CUDA build of torch; run scripts/test --gpu on a GPU node"
        )
    return {"torch": version, "cuda": built, "count": count}


def test_nvml_reports_the_gpus_torch_sees(cuda):
    pytest.importorskip("pynvml", reason="nvidia-ml-py is not installed (requirements/agent.txt)")
    out = gpu.collect()
    assert out["error"] is None, out["error"]
    assert len(out["devices"]) >= cuda["count"]
    assert out["driver"] and out["cuda_driver"]
    for dev in out["devices"]:
        assert dev["name"] and dev["uuid"].startswith("GPU-") and dev["memory_total_mib"] > 1024
        assert dev["pcie"]["max_gen"] >= 1 and dev["pcie"]["width"] >= 1
        assert list(dev["ecc"]) == ["enabled", "volatile", "aggregate"]
    json.dumps(out)


def test_the_gpu_check_measures_every_gpu(cuda):
    command = {
        "v": 1,
        "kind": "gpu",
        "probe_id": 1,
        "node": "gpu-node",
        "memory_fraction": 0.5,
        "matmul_n": 4096,
        "matmul_iterations": 10,
        "copy_bytes": 64 * 2**20,
        "copy_iterations": 5,
        "deadline_s": 280.0,
    }
    result = run_gpu_check(command)
    assert result == gpu_contract.validate_result(result)
    assert result["status"] in ("ok", "degraded"), result["hint"]
    assert len(result["devices"]) == cuda["count"]
    for dev in result["devices"]:
        assert dev["memory_touched_gib"] > 0.5 * 0.5 * dev["memory_free_gib"]
        assert dev["bf16_tflops"] > 1 and dev["fp16_tflops"] > 1
        assert dev["h2d_gbps"] > 0.5 and dev["d2h_gbps"] > 0.5
        assert dev["pcie_gbps"] is None or dev["pcie_gbps"] > 1
    assert set(result["stage_times"]) >= {"init", "memory", "matmul", "copy"}
    count = cuda["count"]
    # The GPU x GPU matrix: every ordered pair; one GPU gives a 1x1 matrix, no pair to measure.
    assert len(result["pairs"]) == count * (count - 1)
    for p in result["pairs"]:
        assert p["status"] == "ok", p
        assert p["p2p_gbps"] > 0.5 and p["p2p_off_gbps"] > 0.5 and p["nccl_busbw_gbps"] > 0.5, p
    print(f"gpu check on {count} GPU(s): {json.dumps(result['devices'])} pairs: {json.dumps(result['pairs'])}")


@pytest.mark.django_db(transaction=True)
def test_a_gpu_sweep_end_to_end_on_this_node(cuda, stack, client):
    """The agent on this node, the server stack, ``manage.py sweep --kind gpu --wait --json``, and the node's
    GPU JSON the node page draws (GET /api/nodes/NAME/gpus); figures kept in test-artifacts/gpu-sweep.json."""
    from tests.support.artifacts import ARTIFACTS
    from tests.support.dashboard_rows import make_user
    from tests.support.sweep_setup import manage, wait_online

    stack.start_agent("gpu-node")
    try:
        wait_online(["gpu-node"], timeout=120)
        run = manage(stack, "sweep", "--kind", "gpu", "--nodes", "gpu-node", "--wait", "--json", "--timeout", "250")
        assert run.returncode in (0, 1), run.stdout[-3000:] + run.stderr[-3000:]
        report = json.loads(run.stdout)
        [check] = report["gpus"]
        assert check["status"] in ("ok", "degraded") and len(check["devices"]) == cuda["count"], check
        client.force_login(make_user("gpu-viewer", operator=False))
        node = client.get("/api/nodes/gpu-node/gpus").json()
        assert node["check"]["sweep"] == report["sweep"]
        assert node["check"]["matrix"]["gpus"] == list(range(cuda["count"]))
        assert len(node["devices"]) >= cuda["count"]  # NVML's facts from the agent's heartbeats
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        (ARTIFACTS / "gpu-sweep.json").write_text(json.dumps({"sweep": report, "node": node}, indent=1))
    finally:
        stack.stop_agent("gpu-node")


NCCL_WORLD_OF_ONE = textwrap.dedent("""
    import json, datetime, torch, torch.distributed as dist
    store = dist.HashStore()
    dist.init_process_group("nccl", store=store, rank=0, world_size=1, timeout=datetime.timedelta(seconds=30),
                            device_id=torch.device("cuda", 0))
    t = torch.full((1024,), 3.0, device="cuda:0")
    dist.all_reduce(t)
    torch.cuda.synchronize()
    print(json.dumps({"sum": t[0].item(), "nccl": ".".join(map(str, torch.cuda.nccl.version()))}))
    dist.destroy_process_group()
""")


def test_nccl_all_reduce_in_a_world_of_one(cuda):
    out = subprocess.run([sys.executable, "-c", NCCL_WORLD_OF_ONE], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    answer = json.loads(out.stdout.strip().splitlines()[-1])
    assert answer["sum"] == 3.0 and answer["nccl"]


def test_two_probe_halves_on_one_gpu_are_named_duplicate_gpu(cuda, redis_url, monkeypatch):
    # Both halves see only GPU 0, and start cold so that they inherit that.
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    monkeypatch.setenv("CLUSTER_HEALTH_WARM_PROBES", "0")
    timeouts = {"resolve": 2.0, "connect": 5.0, "store": 20.0, "init": 60.0, "collective": 10.0, "bandwidth": 4.0}
    results = pair(redis_url, backend="nccl", last_stage="collective", timeouts=timeouts, deadline_s=150.0)
    for result in results:
        assert (result["status"], result["stage"], result["reason"]) == ("failed", "init", "duplicate_gpu"), result
        assert "use the same GPU" in result["hint"]
