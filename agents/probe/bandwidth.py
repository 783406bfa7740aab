"""The bandwidth stage: all_reduce of each size in turn within the stage's budget, the bus bandwidth of each.

Before each size the ranks agree whether it still fits the budget (estimated from the
last size), so that all of them stop at the same size.
"""

from __future__ import annotations

import time

from agents import contract, evidence
from agents.probe.collective import agree, check_sum, run_collective
from agents.probe.state import ProbeState


def bandwidth(p: ProbeState) -> None:
    torch, cmd = p.torch, p.cmd
    budget = p.t["bandwidth"]
    p.enter("bandwidth", budget + p.t["collective"])
    began = time.monotonic()
    factor = contract.busbw_factor(p.n)
    rows, skipped = [], []
    last = None  # (bytes, seconds per iteration)
    # What else the host does meanwhile: a slow pair on a busy node is contended, not degraded.
    before = evidence.load_snapshot(p.interface)
    own_bytes = 0
    for size in cmd["sizes"]:
        if last is not None:
            estimate = last[1] * size / last[0] * (cmd["warmup"] + cmd["iterations"] + 1)
            go = time.monotonic() - began + estimate <= budget
            if not agree(p, go):
                skipped = [s for s in cmd["sizes"] if s >= size]
                break
        numel = max(1, size // 4)
        p.evidence["size_in_flight"] = numel * 4  # a stall here names the size that never completed
        buf = torch.empty(numel, dtype=torch.float32, device=p.device)
        buf.fill_(p.rank + 1)
        run_collective(p, buf)
        check_sum(p, buf, f"all_reduce of {size} bytes")
        buf.zero_()  # zeros stay zeros however often they are summed
        for _ in range(cmd["warmup"]):
            run_collective(p, buf)
        t0 = time.perf_counter()
        for _ in range(cmd["iterations"]):
            run_collective(p, buf)
        per_iter = (time.perf_counter() - t0) / cmd["iterations"]
        nbytes = numel * 4
        algbw = nbytes / per_iter / 1e9
        rows.append(
            {
                "bytes": nbytes,
                "time_us": round(per_iter * 1e6, 3),
                "algbw_gbps": round(algbw, 6),
                "busbw_gbps": round(algbw * factor, 6),
                "ok": True,
            }
        )
        last = (nbytes, per_iter)
        # Each rank sends and receives 2(n-1)/n of the buffer per all_reduce (a ring): both directions count.
        own_bytes += int(4 * (p.n - 1) / p.n * nbytes * (cmd["warmup"] + cmd["iterations"] + 1))
        p.evidence["largest_ok_bytes"] = max(nbytes, p.evidence.get("largest_ok_bytes") or 0)
        p.evidence.pop("size_in_flight", None)
        p.log.emit(event="size", bytes=nbytes, time_us=rows[-1]["time_us"])
    p.evidence["load"] = evidence.load_delta(before, evidence.load_snapshot(p.interface), own_bytes)
    p.measured["sizes"] = rows
    p.measured["algbw_gbps"] = rows[-1]["algbw_gbps"]
    p.measured["busbw_gbps"] = rows[-1]["busbw_gbps"]
    p.extra["sizes_run"] = [r["bytes"] for r in rows]
    p.extra["sizes_skipped"] = skipped
    p.extra["bandwidth_budget_s"] = budget
