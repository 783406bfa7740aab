"""The namespace bed's six-host faults as pair rows: a firewall between host1 and host2, host3 shaped
to 200 Mbit/s, host5's agent stopped (host2<->host5 timed out as it stopped; its other pairs found it offline).

Shared by the blame rules' unit tests and the dashboard's browser tests, so both read the same case.
"""

from __future__ import annotations

from itertools import combinations
from typing import Any

SIX = [f"host{i}" for i in range(1, 7)]
FAST_GBPS, SLOW_GBPS = 0.42, 0.024  # what the bed measured: host3's links 17x slower


def why(a: str, b: str) -> tuple[str, str | None, str] | None:
    """(status, stage, reason) of a pair that did not pass, else None."""
    if (a, b) == ("host1", "host2"):
        return ("timeout", "connect", "connect_timeout")
    if (a, b) == ("host2", "host5"):
        return ("timeout", "store", "store_timeout")
    if "host5" in (a, b):
        return ("offline", None, "agent_offline")
    return None


def six_host_pairs() -> list[dict[str, Any]]:
    """Every pair of SIX in planner order, shaped as the culprit rules read them."""
    out = []
    for a, b in combinations(SIX, 2):
        bad = why(a, b)
        bw = None if bad else SLOW_GBPS if "host3" in (a, b) else FAST_GBPS
        status, stage, reason = bad or ("ok", "bandwidth", None)
        out.append(
            {
                "a": a,
                "b": b,
                "status": status,
                "stage": stage,
                "reason": reason,
                "busbw_gbps": bw,
                "sizes": [{"bytes": 1 << 20, "busbw_gbps": bw}] if bw else [],
                "evidence": None,
            }
        )
    return out
