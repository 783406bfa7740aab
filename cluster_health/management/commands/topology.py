"""The groups (racks, leaves) a full sweep's measurements show, held against the declared topology.

``topology infer [--sweep N] [--json]`` prints them (default: the latest finished full sweep);
``topology export --slurm [--sweep N] [--out FILE]`` writes them as a Slurm topology.conf, which
``nodes topology FILE`` reads back. docs/TOPOLOGY.md says how the groups are found.
"""

from __future__ import annotations

import json

from django.core.management.base import BaseCommand, CommandError

from cluster_health.core import topology, topology_inference
from cluster_health.shapes import topology_report


class Command(BaseCommand):
    help = (
        "'infer': the groups (racks, leaves) a full sweep's latency and busbw show, a confidence per node, and the "
        "nodes whose declared group they contradict; 'export --slurm': those groups as a Slurm topology.conf."
    )

    def add_arguments(self, parser):
        parser.add_argument("action", choices=("infer", "export"))
        parser.add_argument("--sweep", type=int, help="a finished full sweep's id (default: the latest)")
        parser.add_argument("--json", action="store_true", help="infer: the JSON document (docs/TOPOLOGY.md)")
        parser.add_argument("--slurm", action="store_true", help="export: a Slurm topology.conf (topology/tree)")
        parser.add_argument("--out", help="export: write to this file instead of standard output")

    def handle(self, *args, **opts):
        if opts["action"] == "export" and not opts["slurm"]:
            raise CommandError("topology export: say the format: topology export --slurm")
        try:
            sweep = topology_report.topology_sweep(opts["sweep"])
            inferred, report, _ = topology_report.infer(sweep)
        except topology_report.NoMatrix as exc:
            raise CommandError(f"topology {opts['action']}: {exc}") from None
        if opts["action"] == "infer":
            self.stdout.write(json.dumps(report, indent=2) if opts["json"] else _text(sweep.pk, report))
            return
        if inferred.answer == topology_inference.LOW_CONFIDENCE:
            raise CommandError(
                f"topology export: sweep {sweep.pk}'s groups are low confidence (the spread inside them is close to "
                "the gap between them): no topology.conf written from them; run a full sweep on a quieter fleet"
            )
        note = f"written by manage.py topology export from sweep {sweep.pk}: {report['answer']}"
        if report["unplaced"]:
            note += f"\nleft out, too few pairs measured: {', '.join(report['unplaced'])}"
        try:
            text = topology.slurm_conf([(g["name"], g["nodes"]) for g in report["groups"]], note=note)
        except topology.TopologyError as exc:
            raise CommandError(f"topology export: {exc}") from None
        if not opts["out"]:
            self.stdout.write(text, ending="")
            return
        try:
            with open(opts["out"], "w") as f:
                f.write(text)
        except OSError as exc:
            raise CommandError(f"topology export: cannot write {opts['out']}: {exc}") from None
        self.stderr.write(f"wrote {len(report['groups'])} group(s) of sweep {sweep.pk} to {opts['out']}")


def _text(sweep: int, report: dict) -> str:
    lines = [f"sweep {sweep}: {report['answer']} (from {' and '.join(report['metrics'])})"]
    for g in report["groups"]:
        declared = f" (declared: {', '.join(g['declared'])})" if g["declared"] else ""
        lines.append(f"{g['name']}{declared}: {len(g['nodes'])} node(s)")
        for node in g["nodes"]:
            c = g["confidence"][node]
            lines.append(f"  {node}" + ("" if c is None else f"  confidence {c:.2f}"))
    if report["unplaced"]:
        lines.append(f"unplaced (too few pairs measured): {', '.join(report['unplaced'])}")
    if not report.get("uplinks"):
        lines.append("uplinks: not measured yet (a topology sweep runs a round of them: docs/TOPOLOGY.md, 'Uplinks')")
    else:
        lines.append(f"uplinks (topology sweep {report['uplinks_sweep']}):")
        for u in report["uplinks"]:
            figure = "nothing measured" if u["gbps"] is None else f"{u['gbps']:.3g} GB/s"
            over = "" if u["oversubscription"] is None else f", oversubscription {u['oversubscription']:.3g}:1"
            apart = " (low confidence: its pairs did not measure at once)" if u["concurrent"] is False else ""
            lines.append(f"  {u['group']}: {figure} with {u['senders']} of its nodes sending at once{over}{apart}")
    lines += [m["text"] for m in report["mismatches"]] or ["mismatches: none"]
    return "\n".join(lines)
