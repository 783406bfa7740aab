"""The GPU x GPU matrix of one node, the gpu check's last stage (agents/gpu_check.py): for every ordered pair
of local GPUs, the peer-to-peer copy rate with P2P on and forced off, the NCCL ``all_reduce`` busbw of the
two GPUs in two processes, and the link NVML reports between them.

- P2P on: ``dst.copy_(src)`` between the two devices, which CUDA runs as a peer copy where
  ``cudaDeviceCanAccessPeer`` allows it (torch enables peer access for it).
- P2P forced off: the same bytes staged through a pinned host buffer (device to host, host to
  device), which is what the driver does for a pair without peer access.
- NCCL: one process per GPU (spawned once, a Gloo group over all of them for the barriers), then
  for each pair in turn an NCCL group of the two, warmed up, timed over ``iterations``
  all_reduces; with two ranks busbw = algbw * 2(n-1)/n = algbw.
- Link: NVLink lanes straight to the other GPU, or into an NVSwitch fabric both GPUs are on
  (lanes: the fewer of the two), else the PCIe topology level
  (``nvmlDeviceGetTopologyCommonAncestor``).

Only the link reading runs without CUDA (the tests feed it the fake NVML); the rest runs where
torch sees at least two GPUs.
"""

from __future__ import annotations

import os
import tempfile
import time
from collections import Counter
from typing import Any

# nvmlDeviceGetTopologyCommonAncestor's levels: the same board, one PCIe switch, several switches,
# the CPU's host bridge, the same NUMA node, across sockets.
TOPOLOGY_LINKS = {0: "pcie_switch", 10: "pcie_switch", 20: "pcie_switch", 30: "host_bridge", 40: "numa_node"}
TOPOLOGY_SYSTEM = "system"


def _bus(value: Any) -> str:
    text = value.decode(errors="replace") if isinstance(value, bytes) else str(value)
    return text.strip().upper()


def nvml_links(nvml: Any, bus_ids: list[str | None]) -> dict[tuple[int, int], dict[str, Any]]:
    """{(a, b): {"link", "nvlink_lanes"}} for every ordered pair of the GPUs whose NVML PCI bus ids are
    ``bus_ids`` (in torch's order); {} when NVML cannot be read."""
    try:
        nvml.nvmlInit()
    except Exception:
        return {}
    try:
        handles = [nvml.nvmlDeviceGetHandleByPciBusId(b) if b else None for b in bus_ids]
        gpus = {_bus(b): i for i, b in enumerate(bus_ids) if b}
        lanes: list[Counter[str]] = []
        for h in handles:
            remote: Counter[str] = Counter()
            for link in range(getattr(nvml, "NVML_NVLINK_MAX_LINKS", 18)) if h is not None else ():
                try:
                    if nvml.nvmlDeviceGetNvLinkState(h, link):
                        remote[_bus(nvml.nvmlDeviceGetNvLinkRemotePciInfo(h, link).busId)] += 1
                except Exception:
                    break  # no such link on this GPU, or no NVLink at all
            lanes.append(remote)
        fabric = [sum(n for bus, n in remote.items() if bus not in gpus) for remote in lanes]
        out: dict[tuple[int, int], dict[str, Any]] = {}
        for a in range(len(bus_ids)):
            for b in range(len(bus_ids)):
                if a == b:
                    continue
                direct = lanes[a][_bus(bus_ids[b])] if bus_ids[b] else 0
                if direct or (fabric[a] and fabric[b]):
                    out[(a, b)] = {"link": "nvlink", "nvlink_lanes": direct or min(fabric[a], fabric[b])}
                    continue
                try:
                    level = nvml.nvmlDeviceGetTopologyCommonAncestor(handles[a], handles[b])
                    kind = TOPOLOGY_LINKS.get(level, TOPOLOGY_SYSTEM)
                except Exception:
                    kind = "unknown"
                out[(a, b)] = {"link": kind, "nvlink_lanes": None}
        return out
    finally:
        try:
            nvml.nvmlShutdown()
        except Exception:
            pass


def copy_gbps(torch: Any, src: int, dst: int, nbytes: int, iterations: int, staged: bool) -> float:
    """GB/s of copying nbytes from GPU src to GPU dst: directly (P2P where allowed), or staged through pinned
    host memory (P2P forced off)."""
    a = torch.empty(nbytes, dtype=torch.uint8, device=f"cuda:{src}")
    b = torch.empty(nbytes, dtype=torch.uint8, device=f"cuda:{dst}")
    host = torch.empty(nbytes, dtype=torch.uint8, pin_memory=True) if staged else None

    def once() -> None:
        if host is None:
            b.copy_(a, non_blocking=True)
        else:
            host.copy_(a)  # synchronous: the host copy must land before it is read
            b.copy_(host, non_blocking=True)

    once()  # warm-up: peer access enabled, pages mapped
    torch.cuda.synchronize(src), torch.cuda.synchronize(dst)
    start = time.perf_counter()
    for _ in range(iterations):
        once()
    torch.cuda.synchronize(src), torch.cuda.synchronize(dst)
    return round(nbytes * iterations / (time.perf_counter() - start) / 1e9, 3)


def _nccl_rank(
    rank: int, world: int, store: str, pairs: list[tuple[int, int]], nbytes: int, iterations: int, out: Any
) -> None:
    """One GPU's process: a Gloo group over every GPU for the barriers, then an NCCL group per pair in turn."""
    import torch
    import torch.distributed as dist

    torch.cuda.set_device(rank)
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=world)
    tensor = torch.ones(max(1, nbytes // 4), dtype=torch.float32, device=f"cuda:{rank}")
    for a, b in pairs:
        group = dist.new_group([a, b], backend="nccl")  # every rank creates every group, in the same order
        if rank in (a, b):
            dist.all_reduce(tensor, group=group)  # warm-up: the communicator is made here
            torch.cuda.synchronize()
            start = time.perf_counter()
            for _ in range(iterations):
                dist.all_reduce(tensor, group=group)
            torch.cuda.synchronize()
            if rank == a:
                out.put((a, b, round(tensor.numel() * 4 * iterations / (time.perf_counter() - start) / 1e9, 3)))
        dist.barrier()
    dist.destroy_process_group()


def nccl_busbw(world: int, nbytes: int, iterations: int, timeout_s: float) -> dict[tuple[int, int], float]:
    """{(a, b) with a < b: busbw GB/s} of an NCCL all_reduce between each two of ``world`` GPUs."""
    import torch.multiprocessing as mp

    pairs = [(a, b) for a in range(world) for b in range(a + 1, world)]
    ctx = mp.get_context("spawn")
    out = ctx.SimpleQueue()
    with tempfile.TemporaryDirectory() as tmp:
        store = os.path.join(tmp, "store")
        procs = mp.start_processes(  # type: ignore[no-untyped-call]  # unannotated in torch
            _nccl_rank,
            args=(world, store, pairs, nbytes, iterations, out),
            nprocs=world,
            join=False,
            start_method="spawn",
        )
        deadline = time.monotonic() + timeout_s
        while not procs.join(timeout=max(0.1, deadline - time.monotonic())):
            if time.monotonic() >= deadline:
                for p in procs.processes:
                    p.kill()
                break
    found: dict[tuple[int, int], float] = {}
    while not out.empty():
        a, b, busbw = out.get()
        found[(a, b)] = busbw
    return found


def measure(
    torch: Any, links: dict[tuple[int, int], dict[str, Any]], count: int, nbytes: int, iterations: int, deadline: float
) -> list[dict[str, Any]]:
    """Every ordered pair of ``count`` GPUs: copies both ways with P2P on and off, then each pair's NCCL busbw
    within what is left until ``deadline`` (time.monotonic())."""
    out = []
    for a in range(count):
        for b in range(count):
            if a == b:
                continue
            entry: dict[str, Any] = {"src": a, "dst": b, "status": "ok", **links.get((a, b), {"link": "unknown"})}
            try:
                entry["p2p"] = bool(torch.cuda.can_device_access_peer(a, b))
                entry["p2p_gbps"] = copy_gbps(torch, a, b, nbytes, iterations, staged=False)
                entry["p2p_off_gbps"] = copy_gbps(torch, a, b, nbytes, iterations, staged=True)
            except Exception as e:
                entry.update(status="failed", reason="gpu_error", hint=f"copy GPU {a} -> {b}: {str(e)[:300]}")
            out.append(entry)
        torch.cuda.empty_cache()
    busbw = nccl_busbw(count, nbytes, iterations, max(1.0, deadline - time.monotonic()))
    for entry in out:
        key = (min(entry["src"], entry["dst"]), max(entry["src"], entry["dst"]))
        entry["nccl_busbw_gbps"] = busbw.get(key)
    return out
