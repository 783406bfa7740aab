"""Signing cost per agent message: HMAC-SHA256 over canonical JSON, beside the unsigned path, in one process.

    .venv/bin/python benchmarks/signing.py [--messages 2000]

For a typical probe result (a pair half with its per-size results, ~2 KB) and a
heartbeat with a node's facts (~6 KB), it times in the same process:

- unsigned: what every message costs anyway, contract validation (`validate_result`,
  `validate_heartbeat`) after a JSON round trip (what Celery does to the body);
- signed: the agent's `signing.sign` plus the server's `signing.verify` (the key
  lookup is a dict here; on the server it is one indexed row and a Fernet decrypt,
  timed separately as `key_lookup_us` against SQLite), on top of the same work.

The figures are medians of per-message microseconds over the given count.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from agents import contract, signing  # noqa: E402


def result_message() -> dict:
    sizes = [1024 * 4**k for k in range(9)]
    return {
        "v": 1,
        "kind": "pair",
        "probe_id": 123456,
        "sweep_id": 42,
        "node": "gpu-017",
        "rank": 0,
        "status": "ok",
        "stage": "bandwidth",
        "reason": None,
        "hint": None,
        "interface": "ib0",
        "latency_us_p50": 41.2,
        "latency_us_p99": 80.5,
        "algbw_gbps": 11.8,
        "busbw_gbps": 11.8,
        "sizes": [
            {"bytes": s, "time_us": 12.5 * (k + 1), "algbw_gbps": 1.1 * k, "busbw_gbps": 1.1 * k, "ok": True}
            for k, s in enumerate(sizes)
        ],
        "versions": {"torch": "2.13.0", "nccl": "2.21.5", "cuda": "12.4"},
        "stage_times": {s: 0.01 * (i + 1) for i, s in enumerate(contract.STAGES)},
        "duration_s": 1.9,
        "finished_at": time.time(),
    }


def heartbeat_message() -> dict:
    facts = {
        "versions": {"torch": "2.13.0", "nccl": "2.21.5", "cuda": "12.4", "driver": "550.54"},
        "env": {f"NCCL_IB_X{i}": "1" for i in range(20)},
        "interfaces": [{"name": f"ib{i}", "address": f"10.0.{i}.17", "mtu": 4096, "up": True} for i in range(8)],
        "gpus": [
            {
                "index": i,
                "name": "NVIDIA H100 80GB HBM3",
                "uuid": f"GPU-{i:08d}-aaaa-bbbb",
                "memory_total_mib": 81559,
                "pci_bus_id": f"0000:{i:02x}:00.0",
            }
            for i in range(8)
        ],
        "system": {"load": [0.1, 0.2, 0.3], "mem_available_kib": 1 << 30},
    }
    return {
        "v": 1,
        "node": "gpu-017",
        "address": "10.0.0.17",
        "facts": facts,
        "agent_version": "0.1",
        "sent_at": time.time(),
        "busy": False,
    }


def per_message_us(fn, count: int) -> float:
    samples = []
    for _ in range(count):
        t0 = time.perf_counter_ns()
        fn()
        samples.append((time.perf_counter_ns() - t0) / 1000)
    return round(statistics.median(samples), 2)


def key_lookup_us(count: int) -> float | None:
    """The server's lookup of a node's key (one indexed row, Fernet decrypt), against a scratch SQLite database."""
    from benchmarks.scratch import scratch_database

    with scratch_database(None):
        from cluster_health.models import AgentKey

        row, key = AgentKey.enroll("gpu-017")
        return per_message_us(lambda: AgentKey.secret_for("gpu-017", key.key_id), count)


def run(count: int = 2000) -> dict:
    key = signing.new_key("gpu-017")
    out: dict[str, Any] = {"messages": count}
    for name, message, validate, purpose in (
        ("result", result_message(), contract.validate_result, "result"),
        ("heartbeat", heartbeat_message(), contract.validate_heartbeat, "heartbeat"),
    ):
        wire = json.dumps(message)

        def unsigned(wire=wire, validate=validate):
            validate(json.loads(wire))

        def signed(wire=wire, validate=validate, purpose=purpose):
            # The agent signs the body it serialises; the server verifies the body it decoded.
            body = json.loads(wire)
            auth = signing.sign(body, key, purpose)
            signing.verify(body, auth, purpose, key.secret_for)
            validate(body)

        plain, both = per_message_us(unsigned, count), per_message_us(signed, count)
        out[name] = {
            "bytes": len(wire),
            "unsigned_us": plain,
            "signed_us": both,
            "signing_cost_us": round(both - plain, 2),
        }
    out["key_lookup_us"] = key_lookup_us(min(count, 1000))
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=2000)
    print(json.dumps(run(parser.parse_args().messages), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
