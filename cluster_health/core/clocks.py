"""Clock skew: which node's clock is off, and whether the server's own is. Pure: no Django.

Each heartbeat carries the agent's clock; the server keeps its node's offset (node minus
server, queueing included, so a few hundred milliseconds behind the truth). A node off
by more than the tolerance is named; when most nodes are off by about the same amount,
the odd one is the server, and one finding says so instead of blaming the fleet.
"""

from __future__ import annotations

import statistics

from cluster_health.core.finding_row import finding


def _words(offset_s: float) -> str:
    return f"{abs(offset_s):.0f} s {'ahead of' if offset_s > 0 else 'behind'}"


def clock_findings(offsets: dict[str, float | None], tolerance_s: float, window_s: float) -> list[dict[str, str]]:
    """Warnings (never failures: a clock is fixed by NTP, not by draining) for clocks off by more than
    ``tolerance_s``; ``window_s`` is the signature window, past which a node's messages are refused."""
    known = {n: o for n, o in offsets.items() if o is not None}
    if not known:
        return []
    out = []
    fleet = statistics.median(known.values())
    if len(known) >= 3 and abs(fleet) > tolerance_s:
        out.append(
            finding(
                "warn",
                "server_clock_skew",
                "server",
                f"the server's clock is {_words(-fleet)} the clocks of most nodes (median offset {fleet:+.0f} s): "
                "fix NTP on the server",
            )
        )
    else:
        fleet = 0.0
    for node, offset in sorted(known.items()):
        off = offset - fleet
        if abs(off) <= tolerance_s:
            continue
        refused = (
            f"; past {window_s:.0f} s every message it signs is refused as stale, and it looks offline"
            if abs(off) > window_s / 2
            else ""
        )
        out.append(
            finding(
                "warn",
                "clock_skew",
                node,
                f"{node}'s clock is {_words(off)} the {'fleet' if fleet else 'server'}'s: "
                f"its timings and logs disagree with the rest{refused}; fix NTP on {node}",
            )
        )
    return out
