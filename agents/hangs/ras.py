"""NCCL RAS's view of a job (NCCL 2.24 and later; ``ncclras -f json`` since 2.28.7), read on a node only
when its RAS port answers on loopback, bounded and with a deadline, validated, and kept to what the
diagnosis uses: per communicator, the ranks RAS found missing (unresponsive, considered dead) and
those that report an error or an abort, with their hosts and pids.

RAS runs inside the job's NCCL processes and answers on ``NCCL_RAS_ADDR`` (``localhost:28028`` by
default); any rank's answer covers every communicator of the job. Only a loopback address from the
rank's environment is used (the helper never connects off the node on a job's say-so), and only
communicators holding one of this node's ranks' pids are kept (another job on the node may own the port).
"""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
from typing import Any

DEFAULT_PORT = 28028
ADDRESS_VARIABLE = "NCCL_RAS_ADDR"
CONNECT_TIMEOUT_S = 0.5
QUERY_TIMEOUT_S = 10  # ncclras -t: how long the local NCCL process waits for the others
MAX_BYTES = 4 * 1024 * 1024
MAX_COMMUNICATORS = 1024
MAX_RANKS = 65536
MAX_LISTED = 64  # missing or failing ranks kept per communicator
MAX_KEPT = 64  # communicators kept (a node's report holds at most 256 entries a list)


class RasError(ValueError):
    """Not ncclras's JSON, or out of its bounds."""


def port_of(launch: dict[str, str]) -> int | None:
    """The RAS port a rank's environment names on loopback (the default without one); None when it names
    another host or RAS is off (NCCL_RAS_ENABLE=0)."""
    if launch.get("NCCL_RAS_ENABLE") == "0":
        return None
    host, _, port = launch.get(ADDRESS_VARIABLE, f"localhost:{DEFAULT_PORT}").rpartition(":")
    if host.strip("[]") not in ("localhost", "127.0.0.1", "::1", "") or not port.isdigit():
        return None
    return int(port) if 0 < int(port) < 65536 else None


def answers(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=CONNECT_TIMEOUT_S):
            return True
    except OSError:
        return False


def _int(value: Any, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not -(2**31) <= value < 2**63:
        raise RasError(f"{name}: expected an integer")
    return value


def _text(value: Any, name: str, limit: int = 64) -> str:
    if not isinstance(value, str):
        raise RasError(f"{name}: expected a string")
    return "".join(c for c in value if c.isprintable())[:limit]


def _flag(value: Any, name: str) -> bool:
    if not isinstance(value, bool):
        raise RasError(f"{name}: expected true or false")
    return value


def _rank(raw: Any, missing: bool) -> dict[str, Any]:
    if not isinstance(raw, dict) or not isinstance(raw.get("status"), dict):
        raise RasError("ranks: expected objects with a status")
    out = {
        "rank": _int(raw.get("rank"), "rank"),
        "host": _text(raw.get("host"), "host"),
        "pid": _int(raw.get("pid"), "pid"),
    }
    status = raw["status"]
    if missing:
        out["unresponsive"] = _flag(status.get("unresponsive"), "unresponsive")
        out["dead"] = _flag(status.get("considered_dead"), "considered_dead")
        return out
    out["async_error"] = _int(status.get("async_error", 0), "async_error")
    out["abort"] = _flag(status.get("abort_flag", False), "abort_flag")
    counts = raw.get("collective_counts") or {}
    if not isinstance(counts, dict) or len(counts) > 64:
        raise RasError("collective_counts: expected an object")
    out["collectives"] = sum(_int(v, "collective_counts") for v in counts.values())
    return out


def parse(text: str | bytes, pids: set[int] | None = None) -> dict[str, Any]:
    """``ncclras -f json``'s output as {"nccl_version", "communicators": [{"hash", "size", "ranks_found",
    "missing": [...], "failing": [...]}], "timeouts"}; with ``pids``, only communicators holding one of them."""
    if len(text) > MAX_BYTES:
        raise RasError(f"more than {MAX_BYTES} bytes")
    try:
        doc = json.loads(text)
    except (ValueError, RecursionError):
        raise RasError("not JSON") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("communicators"), list):
        raise RasError("not ncclras's JSON (an object with communicators)")
    if len(doc["communicators"]) > MAX_COMMUNICATORS:
        raise RasError(f"communicators: more than {MAX_COMMUNICATORS}")
    comms = []
    for raw in doc["communicators"]:
        if not isinstance(raw, dict) or not isinstance(raw.get("ranks"), list):
            raise RasError("communicators: expected objects with ranks")
        listed = raw.get("missing_ranks") or []
        if not isinstance(listed, list) or len(raw["ranks"]) + len(listed) > MAX_RANKS:
            raise RasError(f"a communicator of more than {MAX_RANKS} ranks")
        ranks = [_rank(r, missing=False) for r in raw["ranks"]]
        missing = [_rank(r, missing=True) for r in listed]
        if pids is not None and not {r["pid"] for r in ranks + missing} & pids:
            continue
        comms.append(
            {
                "hash": _text(raw.get("hash"), "hash", 24),
                "size": _int(raw.get("size"), "size"),
                "ranks_found": len(ranks),
                "missing": missing[:MAX_LISTED],
                "failing": [r for r in ranks if r["async_error"] or r["abort"]][:MAX_LISTED],
            }
        )
    footer = doc["ras"] if isinstance(doc.get("ras"), dict) else {}
    # The ones with something to say first, when there are more than are kept.
    comms.sort(key=lambda c: not (c["missing"] or c["failing"]))
    return {
        "nccl_version": _text(doc.get("nccl_version", ""), "nccl_version", 32),
        "communicators": comms[:MAX_KEPT],
        "timeouts": _int(footer.get("timeouts_count", 0), "timeouts_count"),
    }


def query(port: int, pids: set[int], client: str | None = None) -> dict[str, Any] | None:
    """This job's communicators as RAS sees them, {"error": why} when RAS answers but cannot be read,
    or None when nothing answers on the port (no NCCL job here, or RAS off). ``client``: NCCL's
    ``ncclras`` (found on PATH when not given)."""
    if not answers(port):
        return None
    client = client or shutil.which("ncclras")
    if client is None:
        return {"error": f"NCCL RAS answers on port {port} but ncclras is not installed on this node"}
    try:
        run = subprocess.run(
            [client, "-f", "json", "-p", str(port), "-t", str(QUERY_TIMEOUT_S)],
            capture_output=True,
            timeout=QUERY_TIMEOUT_S + 5,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return {"error": f"ncclras did not answer within {QUERY_TIMEOUT_S + 5} s"}
    if run.returncode != 0:
        return {"error": (run.stderr.decode(errors="replace").strip().splitlines() or ["ncclras failed"])[-1][:300]}
    try:
        return parse(run.stdout, pids)
    except RasError as exc:
        return {"error": f"ncclras: {exc}"}
