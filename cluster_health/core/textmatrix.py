"""The sweep as text for a terminal: a pair matrix with a legend, findings and the verdict. Pure."""

from __future__ import annotations

from typing import Any

from cluster_health import vocabulary
from cluster_health.core import fleet

SYMBOLS = {
    "ok": ".",
    "degraded": "d",
    "failed": "X",
    "timeout": "T",
    "offline": "O",
    "skipped": "-",
    "transient": "t",
    "contended": "c",
    "pending": "?",
    "running": "?",
}
LEGEND = ". ok   d degraded   X failed   T timeout   O offline   - skipped   t transient   c contended   ? not finished"
MAX_MATRIX_NODES = 64


def render(report: dict[str, Any]) -> str:
    """``report`` is the sweep JSON (documents.sweep_json)."""
    nodes, pairs = report["nodes"], report.get("pairs", [])
    lines = [
        f"sweep {report['sweep']} ({report['kind']}, {report['backend']}): {report['status']}, "
        f"verdict {report['verdict'].upper()}"
        + (f", {report['duration_s']:.1f}s" if report.get("duration_s") else "")
        + (f", {report['rounds']} rounds" if report.get("rounds") else "")
    ]
    if report.get("error"):
        lines.append(f"error: {report['error']}")
    planned = fleet.parse_time(report.get("started") or report.get("created"))
    for absent in report.get("offline_at_start") or []:
        silence = fleet.describe_silence(fleet.parse_time(absent["last_heartbeat"]), planned) if planned else ""
        lines.append(f"not probed: {absent['node']}, offline when the sweep started: {silence}")
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
    bad = [p for p in pairs if p["status"] in (*vocabulary.BAD_STATUSES, "degraded")]
    for p in bad[:20]:
        lines.append(
            f"  {p['a']}<->{p['b']}: {p['status']}"
            + (f" at {p['stage']}" if p.get("stage") else "")
            + f" ({p['reason']})"
            + (f" - {p['hint']}" if p.get("hint") else "")
        )
    if len(bad) > 20:
        lines.append(f"  ... and {len(bad) - 20} more")
    for g in report.get("groups", []):
        lines.append(
            f"{g['kind']} over {len(g['nodes'])} nodes: {g['status']}"
            + (f" at {g['stage']}" if g.get("stage") and g.get("reason") else "")
            + (f" ({g['reason']})" if g.get("reason") else "")
            + (f", busbw {g['busbw_gbps']} GB/s" if g.get("busbw_gbps") is not None else "")
        )
    lines += gpu_lines(report.get("gpus") or [])
    if report.get("findings"):
        lines.append("findings:")
        for f in report["findings"]:
            lines.append(f"  [{f['severity']}] {f['subject']}: {f['text']}")
    lines += trending_lines(report.get("trending_down") or [])
    return "\n".join(lines)


def gpu_lines(checks: list[dict[str, Any]]) -> list[str]:
    """A gpu sweep's checks (documents.sweep_json's ``gpus``): a line per node, one per GPU under it."""
    lines = []
    for c in checks:
        why = f" ({c['reason']})" if c.get("reason") else ""
        lines.append(f"gpu check {c['node']}: {c['status']}{why}" + (f" - {c['hint']}" if c.get("hint") else ""))
        for d in c.get("devices") or []:
            figures = ", ".join(
                f"{key} {d[key]:g}" + (" (slow)" if key in d.get("slow", ()) else "")
                for key in ("bf16_tflops", "fp16_tflops", "h2d_gbps", "d2h_gbps")
                if isinstance(d.get(key), (int, float))
            )
            lines.append(
                f"  GPU {d['index']} {d.get('name') or ''}: {d['status']}" + (f", {figures}" if figures else "")
            )
    return lines


def trending_lines(trending: list[dict[str, Any]]) -> list[str]:
    """The links trending down (documents.sweep_json's ``trending_down``) as a short section."""
    if not trending:
        return []
    return ["trending down:"] + [
        f"  {t['link']}: busbw {t['from_busbw_gbps']:.3g} -> {t['to_busbw_gbps']:.3g} GB/s over {t['sweeps']} sweeps"
        for t in trending
    ]
