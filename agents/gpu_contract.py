"""The `gpu` check's messages: one command per node, no peer, and its per-GPU result.

Plain data only, like agents.contract (whose statuses and reason codes it
uses): the server imports it to build commands and validate results, the
agent to run them. Also the PCIe table both sides compare copy rates with.
"""

from __future__ import annotations

from typing import Any

from agents import contract
from agents.contract import ContractError, _choice, _num, _object, _text

KIND = "gpu"
STAGES = ("init", "memory", "matmul", "copy", "pairs")
MAX_GPUS = 64
MAX_PAIRS = MAX_GPUS * (MAX_GPUS - 1)  # ordered pairs of the intra-node matrix
# How two GPUs of one node are connected, as NVML's topology says (nvmlDeviceGetTopologyCommonAncestor, and
# NVLink's remote PCI address): NVLink lanes between them, a PCIe switch, the CPU's host bridge, the
# same NUMA node, across sockets; unknown where NVML could not tell.
LINKS = ("nvlink", "pcie_switch", "host_bridge", "numa_node", "system", "unknown")

# per GPU for memory, matmul and copy; "pairs" for the whole GPU x GPU matrix (28 pairs on 8 GPUs, each a
# few copies and one NCCL communicator of two)
DEFAULT_TIMEOUTS = {"init": 60.0, "memory": 30.0, "matmul": 30.0, "copy": 30.0, "pairs": 120.0}
DEFAULT_MEMORY_FRACTION = 0.8  # of the free memory: leaves room for the CUDA context and other tenants
DEFAULT_MATMUL_N = 8192  # square bf16/fp16 matmuls of this size keep an H100 busy for milliseconds each
DEFAULT_MATMUL_ITERATIONS = 20
DEFAULT_COPY_BYTES = 256 * 2**20
DEFAULT_COPY_ITERATIONS = 10
# A pinned copy below this share of what the PCIe link carries is reported `degraded`.
COPY_MIN_FRACTION = 0.6

# Usable bytes per second per lane and direction, after line encoding (8b/10b to Gen2,
# 128b/130b Gen3-5, FLIT Gen6), in GB/s.
PCIE_LANE_GBPS = {1: 0.25, 2: 0.5, 3: 0.985, 4: 1.969, 5: 3.938, 6: 7.563}


def pcie_gbps(gen: Any, width: Any) -> float | None:
    """What a PCIe link of this generation and width carries one way, in GB/s (None if unknown)."""
    if not isinstance(gen, int) or not isinstance(width, int) or gen not in PCIE_LANE_GBPS or width <= 0:
        return None
    return round(PCIE_LANE_GBPS[gen] * width, 3)


def default_deadline(timeouts: dict[str, float], gpus: int = 8) -> float:
    """Whole-check deadline: init once, the per-GPU stages once per GPU, the GPU x GPU matrix where there
    are two GPUs or more, plus process start."""
    per_gpu = timeouts["memory"] + timeouts["matmul"] + timeouts["copy"]
    pairs = timeouts.get("pairs", 0.0) if gpus > 1 else 0.0
    return round(min(contract.MAX_DEADLINE_S, timeouts["init"] + gpus * per_gpu + pairs + 15.0), 1)


def addressed(cmd: dict[str, Any]) -> dict[str, Any]:
    """The fields that address a result to a validated command's probe and node."""
    return {
        "v": contract.VERSION,
        "kind": KIND,
        "probe_id": cmd["probe_id"],
        "sweep_id": cmd["sweep_id"],
        "node": cmd["node"],
    }


def failed_result(cmd: dict[str, Any], reason: str, hint: str, stage: str = "init", **more: Any) -> dict[str, Any]:
    """A failed result for a validated command, written by the agent when the check itself could not say."""
    return dict(addressed(cmd), status="failed", stage=stage, reason=reason, hint=hint, **more)


def validate_command(msg: Any) -> dict[str, Any]:
    """Validate a gpu check command for one node."""
    msg, out = contract.addressed(msg, "command", (KIND,))
    timeouts = contract.merged_timeouts(msg.get("timeouts") or {}, DEFAULT_TIMEOUTS)
    out["timeouts"] = timeouts
    out["memory_fraction"] = float(_num(msg, "memory_fraction", 0.05, 0.95, default=DEFAULT_MEMORY_FRACTION))
    out["matmul_n"] = _num(msg, "matmul_n", 128, 16384, integer=True, default=DEFAULT_MATMUL_N)
    out["matmul_iterations"] = _num(
        msg, "matmul_iterations", 1, contract.MAX_ITERATIONS, integer=True, default=DEFAULT_MATMUL_ITERATIONS
    )
    out["copy_bytes"] = _num(msg, "copy_bytes", 2**20, 2**30, integer=True, default=DEFAULT_COPY_BYTES)
    out["copy_iterations"] = _num(
        msg, "copy_iterations", 1, contract.MAX_ITERATIONS, integer=True, default=DEFAULT_COPY_ITERATIONS
    )
    out["deadline_s"] = float(_num(msg, "deadline_s", 1.0, contract.MAX_DEADLINE_S, default=default_deadline(timeouts)))
    out["expires_at"] = _num(msg, "expires_at", 0, 1e11, optional=True)
    # Seconds it may wait to start, judged against the agent's clock as well (agents.freshness).
    out["lifetime_s"] = _num(msg, "lifetime_s", 1, contract.MAX_DEADLINE_S, optional=True)
    return out


def _device(entry: Any, i: int) -> dict[str, Any]:
    where = f"devices[{i}]"
    entry = _object(entry, where)
    try:
        out = {
            "index": _num(entry, "index", 0, MAX_GPUS - 1, integer=True),
            "name": _text(entry, "name", 128),
            "uuid": _text(entry, "uuid", 128),
            "status": _choice(entry, "status", contract.STATUSES),
            "stage": _choice(entry, "stage", STAGES),
            "reason": _choice(entry, "reason", contract.REASONS, optional=True),
            "hint": _text(entry, "hint"),
            "memory_touched_gib": _num(entry, "memory_touched_gib", 0, 1e5, optional=True),
            "memory_free_gib": _num(entry, "memory_free_gib", 0, 1e5, optional=True),
            "bf16_tflops": _num(entry, "bf16_tflops", 0, 1e6, optional=True),
            "fp16_tflops": _num(entry, "fp16_tflops", 0, 1e6, optional=True),
            "h2d_gbps": _num(entry, "h2d_gbps", 0, 1e5, optional=True),
            "d2h_gbps": _num(entry, "d2h_gbps", 0, 1e5, optional=True),
            "pcie_gbps": _num(entry, "pcie_gbps", 0, 1e5, optional=True),
        }
    except ContractError as e:
        raise ContractError(f"{where}.{e}") from None
    pcie = entry.get("pcie") or {}
    out["pcie"] = (
        {k: pcie.get(k) if isinstance(pcie.get(k), int) else None for k in ("gen", "width", "max_gen", "max_width")}
        if isinstance(pcie, dict)
        else {}
    )
    return out


def _pair(entry: Any, i: int) -> dict[str, Any]:
    """One ordered pair of the intra-node matrix: src -> dst copy rates with P2P on and forced off, the NCCL
    all_reduce busbw of the two (the same both ways), and the link NVML reports between them."""
    where = f"pairs[{i}]"
    entry = _object(entry, where)
    try:
        out = {
            "src": _num(entry, "src", 0, MAX_GPUS - 1, integer=True),
            "dst": _num(entry, "dst", 0, MAX_GPUS - 1, integer=True),
            "link": _choice(entry, "link", LINKS, default="unknown"),
            "nvlink_lanes": _num(entry, "nvlink_lanes", 0, 36, integer=True, optional=True),
            "p2p": entry.get("p2p") if isinstance(entry.get("p2p"), bool) else None,  # cudaDeviceCanAccessPeer
            "p2p_gbps": _num(entry, "p2p_gbps", 0, 1e5, optional=True),
            "p2p_off_gbps": _num(entry, "p2p_off_gbps", 0, 1e5, optional=True),
            "nccl_busbw_gbps": _num(entry, "nccl_busbw_gbps", 0, 1e5, optional=True),
            "status": _choice(entry, "status", contract.STATUSES, default="ok"),
            "reason": _choice(entry, "reason", contract.REASONS, optional=True),
            "hint": _text(entry, "hint"),
        }
    except ContractError as e:
        raise ContractError(f"{where}.{e}") from None
    if out["src"] == out["dst"]:
        raise ContractError(f"{where}: src and dst are both GPU {out['src']}")
    return out


def validate_result(msg: Any) -> dict[str, Any]:
    """Validate one node's gpu check result (node-level status, one entry per GPU, the GPU x GPU matrix)."""
    msg, out = contract.addressed(msg, "result", (KIND,))
    out.update(contract.validate_outcome(msg, STAGES, ("failed", "timeout", "skipped")))
    out["devices"] = contract.validate_list(msg, "devices", MAX_GPUS, "GPUs", _device)
    out["pairs"] = contract.validate_list(msg, "pairs", MAX_PAIRS, "GPU pairs", _pair)
    for field in ("versions", "stage_times", "timings", "extra"):
        out[field] = contract.validate_details(msg, field)
    out["duration_s"] = _num(msg, "duration_s", 0, 1e5, optional=True)
    out["finished_at"] = _num(msg, "finished_at", 0, 1e11, optional=True)
    return out
