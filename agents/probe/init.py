"""The init stage: the Gloo or NCCL process group over the store, and what stops it before it starts.

init_problem is what a rank posts in the store (agents/probe/store.py): a bad
GLOO/NCCL_SOCKET_IFNAME, or NCCL without a usable GPU. Every rank reads every rank's
problem before init, so all of them stop with the same reason instead of waiting.
"""

from __future__ import annotations

import os
from datetime import timedelta
from typing import Any

from agents import netinfo
from agents.probe.errors import StageFailure, classify_collective_error, first_line
from agents.probe.hints import nccl_failure, timeout_hint
from agents.probe.preflight import loopback_note
from agents.probe.state import KEY, ProbeState
from agents.probe.versions import version_text


def init_problem(p: ProbeState) -> dict[str, Any] | None:
    for var in ("GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME"):
        value = os.environ.get(var)
        if value and (var.startswith("GLOO") or p.cmd["backend"] == "nccl"):
            problem = netinfo.ifname_setting_problem(var, value)
            if problem:
                return {"reason": "interface_missing", "text": problem}
    if p.cmd["backend"] == "nccl" and not p.torch.cuda.is_available():
        built = f"torch {p.torch.__version__}, CUDA {p.torch.version.cuda or 'not built in'}"
        return {"reason": "backend_unavailable", "text": f"NCCL needs a CUDA GPU and none is usable ({built})"}
    return None


def init_group(p: ProbeState, store: Any, peers: dict[int, dict[str, Any]]) -> None:
    t, dist, torch = p.t, p.dist, p.torch
    p.enter("init", t["init"])
    problems = [(r, q["node"], q["init_problem"]) for r, q in sorted(peers.items()) if q["init_problem"]]
    if problems:
        r, node, problem = next((x for x in problems if x[0] == p.rank), problems[0])
        prefix = "" if r == p.rank else f"rank {r} ({node}) cannot start: "
        raise StageFailure(problem["reason"], prefix + problem["text"])
    pg_timeout = timedelta(seconds=max(t["init"], t["collective"], t["bandwidth"]))
    kwargs = {}
    if p.cmd["backend"] == "nccl":
        p.device = torch.device("cuda", p.rank % torch.cuda.device_count())
        torch.cuda.set_device(p.device)
        kwargs["device_id"] = p.device
    else:
        p.device = torch.device("cpu")
    # Gloo and NCCL listen on an ephemeral port on every rank and connect to each other.
    p.evidence["transport"] = {"role": "listen_and_connect", "connected": False}
    try:
        dist.init_process_group(
            p.cmd["backend"],
            store=dist.PrefixStore(KEY + "pg", store),
            rank=p.rank,
            world_size=p.n,
            timeout=pg_timeout,
            **kwargs,
        )
        p.groups = [None]
        if p.cmd["multi_group"]:
            p.groups.append(dist.new_group(list(range(p.n)), timeout=pg_timeout))
        p.evidence["transport"]["connected"] = True
    except Exception as e:
        line = first_line(e)
        if named := nccl_failure(p, e):
            raise named from None
        if p.extra.get("version_mismatch"):
            raise StageFailure(
                "version_mismatch",
                f"process group init failed and versions differ: {version_text(p)}",
                detail=line,
            ) from None
        status, reason = classify_collective_error(str(e), "init")
        timed_out = status == "timeout"
        hint = (
            timeout_hint(p, "init", t["init"])
            if timed_out
            else (
                f"{p.name} could not form the {p.cmd['backend']} group with {p.master_label()} "
                f"on interface {p.interface or 'default'}: {line}"
            )
        )
        hint += loopback_note(p)
        raise StageFailure(reason, hint, detail=line, status=status) from None
