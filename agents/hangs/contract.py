"""The messages of a hang diagnosis: the server's ``inspect`` command to a node's agent, and the
agent's report of what that node shows of the job (plain data, shared by both sides)."""

from __future__ import annotations

import json
from typing import Any

from agents.contract import ContractError, JsonBounds, _num, _text, addressed, bounded_json, check_node_name

KIND = "inspect"
TASK_INSPECTION = "server.inspection"  # agent -> server: one node's view of a job (kwargs: inspection)
MAX_INTERVAL_S = 10.0
MAX_REPORT_BYTES = 512 * 1024  # a node's ranks with their stacks and connections, encoded
REPORT_BOUNDS = JsonBounds(10, 256, 4096)


def validate_command(msg: Any) -> dict[str, Any]:
    """An inspect command: the diagnosis (as probe_id), the node, and which job (master or Slurm job)."""
    msg, out = addressed(msg, "command", (KIND,))
    out["master_addr"] = _text(msg, "master_addr", 253)
    out["master_port"] = _num(msg, "master_port", 1, 65535, integer=True, optional=True)
    out["slurm_job"] = _text(msg, "slurm_job", 64)
    if (out["master_addr"] is None) == (out["slurm_job"] is None):
        raise ContractError("a job is chosen by master_addr and master_port, or by slurm_job")
    if out["master_addr"] is not None and out["master_port"] is None:
        raise ContractError("master_port: required with master_addr")
    for field in ("master_addr", "slurm_job"):
        value = out[field]
        if value is not None and (not value or any(c.isspace() or c in "/\\\0" for c in value)):
            raise ContractError(f"{field}: {value[:64]!r} is not an address or a job id")
    out["interval_s"] = _num(msg, "interval_s", 0, MAX_INTERVAL_S, default=2.0)
    out["expires_at"] = _num(msg, "expires_at", 0, 1e11, optional=True)
    out["lifetime_s"] = _num(msg, "lifetime_s", 1, 600, optional=True)
    return out


def validate_report(msg: Any) -> dict[str, Any]:
    """A node's report: its ranks of the job (bounded JSON), or the error that kept it from looking."""
    msg, out = addressed(msg, "inspection", (KIND,))
    out["node"] = check_node_name(msg.get("node"))
    ranks = msg.get("ranks") or []
    if not isinstance(ranks, list):
        raise ContractError("ranks: expected a list")
    out["ranks"] = bounded_json(ranks, "ranks", REPORT_BOUNDS)
    out["error"] = _text(msg, "error", 2000)
    size = len(json.dumps(out, separators=(",", ":")))
    if size > MAX_REPORT_BYTES:
        raise ContractError(f"inspection: {size} bytes encoded, at most {MAX_REPORT_BYTES} allowed")
    return out
