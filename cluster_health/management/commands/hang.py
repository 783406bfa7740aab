"""Diagnose one running job: ``manage.py hang --master ADDR:PORT [--nodes a,b] [--json] [--timeout S]``
(or ``--slurm-job ID``).

The agents of the job's nodes (every active node, or ``--nodes``) report what they see of
its ranks; a live probe runs between the nodes that hold them; the answer names the verdict
and the culprits (docs/HANGS.md). Exit codes: 0 progressing, 1 slow (progressing, held back by a
straggler named as the culprit), 2 hung with a culprit named, 3 unknown (no rank found, or no answer
within ``--timeout``).
"""

from __future__ import annotations

import json
import sys

from django.core.management.base import BaseCommand, CommandError

from cluster_health import hang_diagnoses
from cluster_health.core.hangs import EXIT_CODES


class Command(BaseCommand):
    help = "Diagnose a running job: its ranks as its nodes see them, and a live probe between its nodes."

    def add_arguments(self, parser):
        job = parser.add_mutually_exclusive_group(required=True)
        job.add_argument("--master", metavar="ADDR:PORT", help="the job's MASTER_ADDR:MASTER_PORT")
        job.add_argument("--slurm-job", metavar="ID", help="the job's SLURM_JOB_ID")
        parser.add_argument("--nodes", help="comma-separated node names to look on (default: every active node)")
        parser.add_argument("--json", action="store_true", help="print the answer as JSON")
        parser.add_argument("--timeout", type=float, default=30.0, help="seconds for the whole answer (default 30)")
        parser.add_argument("--interval", type=float, default=2.0, help="seconds between a rank's two samples")

    def handle(self, *args, **opts):
        if not 5.0 <= opts["timeout"] <= 600.0:
            raise CommandError("--timeout: between 5 and 600 seconds")
        if not 0.0 <= opts["interval"] <= 10.0:
            raise CommandError("--interval: between 0 and 10 seconds")
        nodes = [n.strip() for n in opts["nodes"].split(",") if n.strip()] if opts["nodes"] else None
        try:
            diagnosis = hang_diagnoses.request(
                master=opts["master"], slurm_job=opts["slurm_job"], nodes=nodes, interval_s=opts["interval"]
            )
        except hang_diagnoses.HangRequestError as exc:
            raise CommandError(str(exc)) from None
        answer = hang_diagnoses.run(diagnosis, opts["timeout"])
        if opts["json"]:
            self.stdout.write(json.dumps(answer, indent=1))
        else:
            self.stdout.write(_text(answer))
        sys.exit(EXIT_CODES[answer["verdict"]])


def _text(answer: dict) -> str:
    job = answer["job"]
    name = job["master"] or f"Slurm job {job['slurm_job']}"
    lines = [
        f"{answer['verdict'].upper()}: job {name}, {job['ranks_found']} of {job['world_size'] or '?'} ranks found "
        f"on {', '.join(job['nodes']) or 'no node'} ({answer['seconds']} s)"
    ]
    if answer.get("why"):
        lines.append(answer["why"])
    for c in answer["culprits"]:
        lines.append(f"- {c['text']}")
        lines.append(f"  hint: {c['hint']}")
    for r in answer["ranks"]:
        where = r["in"] or {}
        frame = where.get("frame") or {}
        place = where.get("collective") or (f"{frame.get('function')} ({frame.get('file')}:{frame.get('line')})")
        if where.get("collective") and where.get("seq") is not None:
            place += f" #{where['seq']} on {where.get('group')} (Flight Recorder)"
        lines.append(f"  rank {r['rank']} on {r['node']} (pid {r['pid']}): {r['state']}, in {place}")
    return "\n".join(lines)
