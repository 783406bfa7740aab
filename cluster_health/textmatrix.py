"""The sweep as text for a terminal: a pair matrix with a legend, findings and the verdict. Pure."""

from __future__ import annotations

SYMBOLS = {"ok": ".", "degraded": "d", "failed": "X", "timeout": "T", "offline": "O", "skipped": "-",
           "pending": "?", "running": "?"}
LEGEND = ". ok   d degraded   X failed   T timeout   O offline   - skipped   ? not finished"
MAX_MATRIX_NODES = 64


def render(report: dict) -> str:
    """``report`` is the sweep JSON (reports.sweep_json)."""
    nodes, pairs = report["nodes"], report.get("pairs", [])
    lines = [f"sweep {report['sweep']} ({report['kind']}, {report['backend']}): {report['status']}, "
             f"verdict {report['verdict'].upper()}"
             + (f", {report['duration_s']:.1f}s" if report.get("duration_s") else "")
             + (f", {report['rounds']} rounds" if report.get("rounds") else "")]
    if report.get("error"):
        lines.append(f"error: {report['error']}")
    cell = {}
    for p in pairs:
        cell[(p["a"], p["b"])] = cell[(p["b"], p["a"])] = SYMBOLS.get(p["status"], "?")
    if pairs and len(nodes) <= MAX_MATRIX_NODES:
        width = max(len(n) for n in nodes)
        lines.append("")
        # Column headers: node indexes, since names are too wide to stack.
        lines.append(" " * (width + 6) + " ".join(f"{i % 100:>2}" for i in range(len(nodes))))
        for i, a in enumerate(nodes):
            row = " ".join(f"{'  ' if a == b else ' ' + cell.get((a, b), ' ')}" for b in nodes)
            lines.append(f"{a:>{width}} {i:>3}  {row}")
        lines.append("")
        lines.append(f"legend: {LEGEND}")
    counts: dict[str, int] = {}
    for p in pairs:
        counts[p["status"]] = counts.get(p["status"], 0) + 1
    if pairs:
        lines.append("pairs: " + ", ".join(f"{n} {s}" for s, n in sorted(counts.items())))
    measured = [p["busbw_gbps"] for p in pairs if p.get("busbw_gbps") is not None]
    if measured:
        lines.append(f"busbw: min {min(measured):.3g} GB/s, max {max(measured):.3g} GB/s")
    bad = [p for p in pairs if p["status"] in ("failed", "timeout", "offline", "degraded")]
    for p in bad[:20]:
        lines.append(f"  {p['a']}<->{p['b']}: {p['status']} at {p['stage']} ({p['reason']})"
                     + (f" - {p['hint']}" if p.get("hint") else ""))
    if len(bad) > 20:
        lines.append(f"  ... and {len(bad) - 20} more")
    for g in report.get("groups", []):
        lines.append(f"{g['kind']} over {len(g['nodes'])} nodes: {g['status']}"
                     + (f" at {g['stage']} ({g['reason']})" if g.get("reason") else "")
                     + (f", busbw {g['busbw_gbps']} GB/s" if g.get("busbw_gbps") is not None else ""))
    if report.get("findings"):
        lines.append("findings:")
        for f in report["findings"]:
            lines.append(f"  [{f['severity']}] {f['subject']}: {f['text']}")
    return "\n".join(lines)
