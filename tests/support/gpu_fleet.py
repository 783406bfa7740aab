"""A fleet of 8-GPU H100 SXM nodes on recorded figures: each node's NVML facts and its gpu check result.

The facts come from the recorded nodes in tests/support/nvml/ through the fake NVML
(``h100_node`` healthy, ``nvlink_lane_down``: GPU 3's link 7 inactive, ``missing_gpu``:
the GPU at 00000000:48:00.0 fell off the bus and NVML lists 7, ``degraded_pcie``: GPU 2
trained at Gen4 x8). The check results are written from what the gpu check measured on an
H100 80GB HBM3 SXM5 (docs/GPU.md, docs/gpu-h100.json): bf16 793-796 TFLOP/s, fp16
765 TFLOP/s, pinned host copies 54-55 GB/s of the 63 GB/s a Gen5 x16 link carries,
62.9 GiB touched of 78.7 GiB free, with the spread a fleet of one model shows. A GPU
behind a link trained at Gen4 x8 copies at the same 84 % of what that link carries, 13.2 GB/s: 42 % of the
31.5 GB/s its Gen4 x16 maximum carries, so its check reads ``degraded`` (``below_baseline``).
"""

from __future__ import annotations

from typing import Any

from agents import gpu, gpu_contract
from tests.support.nvml_fake import FakeNvml

MODEL = "NVIDIA H100 80GB HBM3"
# Per GPU of a healthy node: bf16, fp16 TFLOP/s, host-to-device and device-to-host GB/s.
H100_FIGURES = [
    (795.8, 765.0, 54.2, 54.8),
    (793.0, 764.6, 55.2, 55.1),
    (794.4, 766.1, 54.7, 54.9),
    (796.1, 763.8, 54.9, 55.0),
    (792.7, 765.4, 54.4, 54.6),
    (795.0, 764.9, 55.0, 55.2),
    (794.2, 766.3, 54.6, 54.8),
    (793.6, 765.7, 54.8, 55.0),
]
GEN4_X8_COPY = (13.2, 13.3)  # a Gen4 x8 link carries 15.75 GB/s one way
# The GPU x GPU matrix of an HGX H100 (NVLink4 through NVSwitch, 18 lanes a GPU): peer-to-peer copies
# 370-390 GB/s one way, the same copy with P2P forced off (staged through pinned host memory, over PCIe
# twice) about 26 GB/s, NCCL all_reduce between two GPUs about 360 GB/s busbw.
P2P_GBPS = 381.0
P2P_OFF_GBPS = 26.4
NCCL_PAIR_BUSBW = 361.0
# Without peer access (ACS or the IOMMU routing a pair through the CPU), a pair copies as if P2P were off,
# and NCCL falls back to shared host memory.
NO_P2P_NCCL_BUSBW = 19.8

# node name -> its NVML recording
FLEET = {
    "gpu-001": "h100_node",
    "gpu-002": "h100_node",
    "gpu-003": "nvlink_lane_down",
    "gpu-004": "missing_gpu",
    "gpu-005": "degraded_pcie",
    "gpu-006": "h100_node",
}
NO_P2P = {"gpu-006": (3, 5)}  # nodes where one GPU pair has no peer access


def facts(recording: str) -> dict[str, Any]:
    """A node's heartbeat facts as the agent reports them from this NVML recording."""
    return {"gpus": gpu.collect(FakeNvml.load(recording))}


def device(index: int, nvml: dict[str, Any], figures: tuple[float, float, float, float]) -> dict[str, Any]:
    """One GPU's entry as the check writes it; a copy below 60 % of what the link's max generation and width
    carry is ``degraded`` there (agents/gpu_check.py, ``copy``)."""
    bf16, fp16, h2d, d2h = figures
    pcie = nvml["pcie"]
    link = gpu_contract.pcie_gbps(pcie["max_gen"], pcie["max_width"])
    out = {
        "index": index,
        "name": MODEL,
        "uuid": nvml["uuid"],
        "status": "ok",
        "stage": "copy",
        "reason": None,
        "hint": None,
        "memory_touched_gib": 62.9,
        "memory_free_gib": 78.7,
        "bf16_tflops": bf16,
        "fp16_tflops": fp16,
        "h2d_gbps": h2d,
        "d2h_gbps": d2h,
        "pcie_gbps": link,
        "pcie": pcie,
    }
    slower = min(h2d, d2h)
    if link and slower < gpu_contract.COPY_MIN_FRACTION * link:
        out.update(
            status="degraded",
            reason="below_baseline",
            hint=(
                f"pinned copies on GPU {index} run {h2d:.1f} GB/s to and {d2h:.1f} GB/s from the GPU, "
                f"{slower / link:.0%} of the {link:.1f} GB/s a PCIe Gen{pcie['max_gen']} x{pcie['max_width']} link "
                f"carries (the link runs Gen{pcie['gen']} x{pcie['width']} now): reseat the card or riser, check the "
                "slot's BIOS lane settings"
            ),
        )
    return out


def pair_matrix(nvml_devices: list[dict[str, Any]], no_p2p: tuple[int, int] | None = None) -> list[dict[str, Any]]:
    """Every ordered pair of the node's GPUs. A GPU with NVLink lanes down has that share less bandwidth into
    the NVSwitch fabric (17 of 18 lanes: 17/18 of the copy rate); the small spread is a fleet's."""
    out = []
    for a, da in enumerate(nvml_devices):
        for b, db in enumerate(nvml_devices):
            if a == b:
                continue
            lanes = min(da["nvlink"]["active"], db["nvlink"]["active"])
            share = lanes / 18
            spread = 1 + ((a * 7 + b * 3) % 5 - 2) / 400  # within 0.5 %
            entry = {
                "src": a,
                "dst": b,
                "link": "nvlink",
                "nvlink_lanes": lanes,
                "p2p": True,
                "p2p_gbps": round(P2P_GBPS * share * spread, 1),
                "p2p_off_gbps": round(P2P_OFF_GBPS * spread, 1),
                "nccl_busbw_gbps": round(NCCL_PAIR_BUSBW * share * spread, 1),
                "status": "ok",
            }
            if no_p2p and {a, b} == set(no_p2p):
                entry.update(p2p=False, p2p_gbps=entry["p2p_off_gbps"], nccl_busbw_gbps=NO_P2P_NCCL_BUSBW)
            out.append(entry)
    return out


def check_result(cmd: dict[str, Any], recording: str) -> dict[str, Any]:
    """The gpu check result this node sends for ``cmd``: one device per GPU its CUDA sees (NVML's list), and
    the matrix of every ordered pair of them."""
    devices = []
    nvml_devices = facts(recording)["gpus"]["devices"]
    for i, nvml in enumerate(nvml_devices):
        figures = H100_FIGURES[i]
        if nvml["pcie"]["max_gen"] == 4:
            figures = (figures[0], figures[1], *GEN4_X8_COPY)
        devices.append(device(i, nvml, figures))
    bad = [d for d in devices if d["status"] != "ok"]
    return {
        **gpu_contract.addressed(cmd),
        "status": bad[0]["status"] if bad else "ok",
        "stage": "copy" if bad else "pairs" if len(devices) > 1 else "copy",
        "reason": bad[0]["reason"] if bad else None,
        "hint": "; ".join(f"GPU {d['index']}: {d['hint']}" for d in bad) or None,
        "devices": devices,
        "pairs": pair_matrix(nvml_devices, NO_P2P.get(cmd["node"])),
        "versions": {"torch": "2.11.0+cu130", "cuda": "13.0"},
        "stage_times": {"init": 5.37, "memory": 2.3, "matmul": 2.9, "copy": 2.4, "pairs": 31.0},
        "duration_s": 13.1,
    }


def skipped_result(cmd: dict[str, Any]) -> dict[str, Any]:
    """What a node without a GPU answers (agents/gpu_check.py)."""
    return {
        **gpu_contract.addressed(cmd),
        "status": "skipped",
        "stage": "init",
        "reason": "no_gpu",
        "hint": f"{cmd['node']} has no usable NVIDIA GPU (NVML reports no GPUs; torch 2.5.1+cpu, CUDA not built in)",
        "devices": [],
    }


def checked_halves(results: list[dict[str, Any]]) -> list:
    """Each result signed by its node's key, queued as the agent's Celery sends it, and checked by the ingest
    consumer (its signature): what the consumer hands to ``ingest.ingest_results``."""
    from agents import contract
    from cluster_health.ingest import consumer
    from cluster_health.queues import dispatch
    from tests.support.sweep_setup import signed

    raw = [
        dispatch.task_message(contract.TASK_RESULT, contract.INGEST_QUEUE, signed("result", r), None) for r in results
    ]
    halves, _ = consumer.checked(raw)
    return halves


def through_the_ingest_queue(driver, results: list[dict[str, Any]]) -> list[str]:
    """The results through the ingest consumer's checks, applied by the driver."""
    from cluster_health import ingest

    return driver.run(ingest.ingest_results, checked_halves(results))


def gpu_sweep(driver, fleet: dict[str, str], nodes: list[str] | None = None):
    """Heartbeats with each node's recorded facts, then a gpu sweep (of ``nodes``; every active node when None):
    the sweep and its commands by node."""
    from devtools.sweep_driver import heartbeat

    for name, recording in fleet.items():
        heartbeat(name, facts=facts(recording))
    sweep = driver.sweep(kind="gpu", **({"nodes": nodes} if nodes else {}))
    return sweep, {c["node"]: c for c in driver.take()}


def recorded_sweep(driver, fleet: dict[str, str] | None = None):
    """A gpu sweep of the recorded fleet, every node answering with its recorded check: the finished sweep."""
    fleet = fleet or FLEET
    # Only the fleet's nodes: beside the session stack, agents of other tests may be heard from too.
    sweep, commands = gpu_sweep(driver, fleet, nodes=list(fleet))
    through_the_ingest_queue(driver, [check_result(commands[n], r) for n, r in fleet.items()])
    sweep.refresh_from_db()
    return sweep
