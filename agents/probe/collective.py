"""The collective stage: a small all_reduce, timed, on every process group; checked every time.

run_collective is the one way any stage runs an all_reduce, so that a failure in any
of them is classified the same (agents/probe/hints.py).
"""

from __future__ import annotations

import time
from typing import Any

from agents.probe.errors import StageFailure
from agents.probe.hints import collective_failure
from agents.probe.state import ProbeState


def run_collective(p: ProbeState, tensor: Any, group: Any = None, op: Any = None) -> None:
    """One all_reduce (SUM unless op is given); a failure becomes the StageFailure it means."""
    try:
        if op is None:
            p.dist.all_reduce(tensor, group=group)
        else:
            p.dist.all_reduce(tensor, op=op, group=group)
        if tensor.is_cuda:
            p.torch.cuda.synchronize()
    except Exception as e:
        raise collective_failure(p, e) from None


def check_sum(p: ProbeState, tensor: Any, what: str) -> None:
    """Every element of an all_reduce of rank + 1 over the ranks must be 1 + 2 + ... + N."""
    expected = p.n * (p.n + 1) / 2
    if not bool((tensor == expected).all()):
        got = tensor.flatten()[0].item()
        raise StageFailure(
            "data_mismatch",
            f"{what} returned wrong data on {p.name}: expected {expected} in every "
            f"element, got {got} (first element): suspect memory, driver or NIC corruption",
        )


def collective(p: ProbeState) -> None:
    torch = p.torch
    cmd = p.cmd
    p.enter("collective", p.t["collective"])
    tensor = torch.zeros(1, dtype=torch.float32, device=p.device)
    samples = []
    for i in range(cmd["warmup"] + cmd["latency_iterations"]):
        for group in p.groups:
            tensor.fill_(p.rank + 1)
            began = time.perf_counter()
            run_collective(p, tensor, group)
            took = time.perf_counter() - began
            check_sum(p, tensor, "the small all_reduce" + (" on the second group" if group is not None else ""))
            if group is None and i >= cmd["warmup"]:
                samples.append(took * 1e6)
    p.measured = {
        "latency_us_p50": round(percentile(samples, 50), 2),
        "latency_us_p99": round(percentile(samples, 99), 2),
    }
    p.evidence["largest_ok_bytes"] = tensor.numel() * tensor.element_size()


def agree(p: ProbeState, go: bool) -> bool:
    """Every rank must take the same decision, or one waits forever in a collective the others skipped."""
    flag = p.torch.tensor([1.0 if go else 0.0], device=p.device)
    run_collective(p, flag, op=p.dist.ReduceOp.MIN)
    return bool(flag.item() > 0.5)


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, int(round(q / 100.0 * len(ordered) + 0.5)) - 1))]
