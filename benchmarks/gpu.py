"""GPU figures on a GPU node, each beside what the hardware allows: the path agents take, not a bare loop.

    PYTHONPATH=.gpu-site python3 benchmarks/gpu.py [--json] [--out FILE]

(on a GPU node, with the node's own Python and CUDA build of torch; `scripts/test --gpu`
installs .gpu-site). What it measures:

- ``facts``: ``agents.gpu.collect()`` through NVML, as the agent reports them (model,
  driver, CUDA driver version, memory, PCIe generation and width now and at most, ECC);
- ``check``: ``agents.gpu_check.run_gpu_check`` with the default command, the same child
  process and watchdog a ``gpu`` command runs (bf16/fp16 TFLOP/s, H2D/D2H GB/s with pinned
  memory, memory touched, stage times), beside the datasheet's dense peak for the model
  and the PCIe link's bandwidth per direction;
- ``nccl_init``: a fresh process's ``init_process_group("nccl", device_id=...)`` in a
  world of one (eager init, as the probe's NCCL path does it) and its first all_reduce;
- ``nccl_pair``: the NCCL pair probe (``agents.runner.run_probe``, both halves on GPU 0,
  each its own process through the Redis rendezvous): what it answers and its stage times.
  One machine holds one node, so this pair can only reach NCCL's duplicate-GPU refusal.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from agents import gpu, gpu_contract  # noqa: E402
from agents.gpu_check import run_gpu_check  # noqa: E402
from devtools.probe_commands import loopback_pair, run_ranks  # noqa: E402
from devtools.services import RedisServer  # noqa: E402

# Dense (no sparsity) peak TFLOP/s from NVIDIA's datasheets, by the start of NVML's model name.
DATASHEET_DENSE_TFLOPS = {
    "NVIDIA H100 80GB HBM3": {"bf16": 989.4, "fp16": 989.4},  # H100 SXM5
    "NVIDIA H100 PCIe": {"bf16": 756.0, "fp16": 756.0},
    "NVIDIA H100 NVL": {"bf16": 835.0, "fp16": 835.0},
    "NVIDIA H200": {"bf16": 989.4, "fp16": 989.4},
    "NVIDIA A100": {"bf16": 312.0, "fp16": 312.0},
}

NCCL_INIT = textwrap.dedent("""
    import json, time, datetime
    t0 = time.perf_counter()
    import torch, torch.distributed as dist
    t1 = time.perf_counter()
    torch.cuda.set_device(0)
    dist.init_process_group("nccl", store=dist.HashStore(), rank=0, world_size=1,
                            timeout=datetime.timedelta(seconds=60), device_id=torch.device("cuda", 0))
    t2 = time.perf_counter()
    x = torch.ones(1, device="cuda:0")
    dist.all_reduce(x)
    torch.cuda.synchronize()
    t3 = time.perf_counter()
    print(json.dumps({"import_s": t1 - t0, "init_s": t2 - t1, "first_all_reduce_s": t3 - t2,
                      "nccl": ".".join(map(str, torch.cuda.nccl.version())), "torch": torch.__version__,
                      "cuda": torch.version.cuda}))
    dist.destroy_process_group()
""")


def peak_for(model: str | None) -> dict[str, float] | None:
    return next((v for k, v in DATASHEET_DENSE_TFLOPS.items() if model and model.startswith(k)), None)


def facts(out: dict[str, Any]) -> dict[str, Any]:
    """What of gpu.collect()'s answer the report keeps."""
    return {
        "error": out.get("error"),
        "driver": out.get("driver"),
        "cuda_driver": out.get("cuda_driver"),
        "devices": out.get("devices") or [],
    }


def check(nvml: dict[str, Any]) -> dict[str, Any]:
    command = {"v": 1, "kind": "gpu", "probe_id": 1, "node": "gpu-node"}
    result = run_gpu_check(command, nvml_facts=nvml)
    names = {d.get("uuid"): d.get("name") for d in nvml.get("devices") or []}
    for dev in result.get("devices") or []:
        model = dev.get("name") or names.get(dev.get("uuid"))
        peak = peak_for(model)
        dev["datasheet_dense_tflops"] = peak
        if peak:
            for dtype in ("bf16", "fp16"):
                if dev.get(f"{dtype}_tflops"):
                    dev[f"{dtype}_of_peak"] = round(dev[f"{dtype}_tflops"] / peak[dtype], 3)
        if dev.get("pcie_gbps"):
            for way in ("h2d", "d2h"):
                if dev.get(f"{way}_gbps"):
                    dev[f"{way}_of_link"] = round(dev[f"{way}_gbps"] / dev["pcie_gbps"], 3)
    return result


def nccl_init() -> dict[str, Any]:
    began = time.perf_counter()
    out = subprocess.run([sys.executable, "-c", NCCL_INIT], capture_output=True, text=True, timeout=180)
    if out.returncode != 0:
        return {"error": out.stderr[-1500:]}
    answer: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    answer["process_s"] = round(time.perf_counter() - began, 3)
    return {k: round(v, 4) if isinstance(v, float) else v for k, v in answer.items()}


def nccl_pair() -> list[dict[str, Any]]:
    """Both halves of an NCCL pair probe on GPU 0, cold (each its own process), through a private Redis."""
    os.environ["CUDA_VISIBLE_DEVICES"] = "0"
    os.environ["CLUSTER_HEALTH_WARM_PROBES"] = "0"
    timeouts = {"resolve": 2.0, "connect": 5.0, "store": 20.0, "init": 60.0, "collective": 10.0, "bandwidth": 4.0}
    with tempfile.TemporaryDirectory() as tmp:
        server = RedisServer(Path(tmp))
        server.start()
        try:
            rdv = "g" + secrets.token_hex(8)
            commands = [
                loopback_pair(rank, rdv, backend="nccl", last_stage="collective", timeouts=timeouts, deadline_s=150.0)
                for rank in (0, 1)
            ]
            results = run_ranks(commands, server.url)
        finally:
            server.stop()
    keep = ("node", "rank", "status", "stage", "reason", "hint", "duration_s")
    return [
        {
            **{k: result.get(k) for k in keep},
            "stage_times": (result.get("evidence") or {}).get("stage_times"),
            "stage_log": (result.get("extra") or {}).get("stage_log"),
        }
        for result in results
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--json", action="store_true", help="one JSON object on stdout")
    parser.add_argument("--out", help="also write the JSON object to this file")
    args = parser.parse_args()
    nvml = gpu.collect()
    report = {
        "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "facts": facts(nvml),
        "check": check(nvml),
        "nccl_init": nccl_init(),
        "nccl_pair": nccl_pair(),
        "pcie_lane_gbps": gpu_contract.PCIE_LANE_GBPS,
    }
    text = json.dumps(report, indent=None if args.json else 2, default=str)
    if args.out:
        Path(args.out).write_text(json.dumps(report, indent=2, default=str) + "\n")
    print(text)


if __name__ == "__main__":
    main()
