"""Request a sweep; with --wait, block until it ends, print it and exit with the verdict's code.

Exit codes (vocabulary.VERDICT_EXIT_CODES): 0 pass, 1 warn, 2 fail, 3 unknown (also
a sweep that failed, was cancelled, or did not end within --timeout).
"""

from __future__ import annotations

import json
import sys

from django.core.management.base import BaseCommand, CommandError

from agents import contract
from cluster_health import vocabulary
from cluster_health.actions import slurm
from cluster_health.core import planner, textmatrix
from cluster_health.shapes import documents
from cluster_health.sweeps import gang, idle, waiting

REQUESTABLE_KINDS = [k for k in vocabulary.SWEEP_KINDS if k != "preflight"]  # a preflight has its own command
KIND_HELP = (
    "discover: try every interface combination of every pair and name the "
    "GLOO_SOCKET_IFNAME / NCCL_SOCKET_IFNAME that works on each node; for large fleets, "
    "sampled: --rounds rounds of random disjoint pairs (--seed to repeat them), "
    "topology: every pair inside each group and one between every two groups, "
    "bisect: a quick pass, then probes around the suspects until each failure is pinned; "
    "gpu: every node's local GPU check (memory, matmul, host copies), compared across the fleet"
)


class Command(BaseCommand):
    help = "Request a sweep of the cluster; with --wait print the matrix or JSON and exit 0/1/2/3."

    def add_arguments(self, parser):
        parser.add_argument(
            "--kind", choices=REQUESTABLE_KINDS, help=f"default full (quick with --slurm-job); {KIND_HELP}"
        )
        parser.add_argument(
            "--nodes", help="comma-separated node names (default: every active node; an offline one fails it)"
        )
        parser.add_argument("--pairs", help="for --kind pairs: a:b,c:d")
        parser.add_argument("--backend", default="gloo", choices=contract.BACKENDS)
        parser.add_argument("--sizes", help="message sizes in bytes, comma-separated")
        parser.add_argument("--iterations", type=int)
        parser.add_argument(
            "--rounds",
            type=int,
            help=f"for --kind sampled: rounds of random pairs (default {planner.SAMPLED_ROUNDS}); with --idle: "
            "at most N rounds of the idle nodes' stalest pairs (default CLUSTER_HEALTH_IDLE_MAX_ROUNDS)",
        )
        parser.add_argument(
            "--seed", type=int, help="for --kind sampled: the seed that draws the pairs (default: drawn)"
        )
        waiting.add_assignments_option(
            parser, "--stage-timeout", "STAGE=S", "per-stage timeout, e.g. connect=2 (repeatable)"
        )
        parser.add_argument("--baseline", help="none, rolling (default), sweep:<id> or baseline:<id>")
        parser.add_argument(
            "--confirm-after",
            type=float,
            metavar="S",
            help="wait S seconds after the planned rounds before the confirmation pass probes the suspects "
            "again, so that a burst can pass (default CLUSTER_HEALTH_CONFIRM_AFTER_S)",
        )
        parser.add_argument("--wait", action="store_true", help="block until the sweep ends")
        parser.add_argument(
            "--timeout",
            type=float,
            default=3600.0,
            help="with --wait: give up after S seconds, cancel the sweep, exit 3",
        )
        parser.add_argument("--json", action="store_true", help="print only the sweep JSON")
        parser.add_argument(
            "--slurm-job",
            metavar="ID",
            help="a gang check for PrologSlurmctld: a sweep of the job's allocated nodes; exit 2 only on "
            "confirmed faults, 0 otherwise (also when the server cannot answer in --timeout)",
        )
        parser.add_argument(
            "--idle",
            action="store_true",
            help="only nodes Slurm reports idle, held from new jobs (a MAINT reservation) for the sweep's "
            "length, their pairs measured longest ago first",
        )
        parser.add_argument(
            "--max-nodes", type=int, help=f"with --idle: at most K nodes (default {idle.DEFAULT_MAX_NODES})"
        )

    def handle(self, *args, **opts):
        if opts["slurm_job"]:
            if opts["idle"] or opts["nodes"] or opts["pairs"]:
                raise CommandError("--slurm-job sweeps the job's own nodes: no --idle, --nodes or --pairs")
            kind = opts["kind"] or "quick"
            warn, say = (lambda line: self.stderr.write(line)), (lambda line: self.stdout.write(line))
            sys.exit(gang.check(opts["slurm_job"], kind, opts["timeout"], warn, say))
        if opts["idle"]:
            self._idle(opts)
            return
        request = {"kind": opts["kind"] or "full", "backend": opts["backend"]}
        if opts["nodes"]:
            request["nodes"] = waiting.node_names(opts["nodes"])
        if opts["pairs"]:
            request["pairs"] = [p.split(":", 1) for p in opts["pairs"].split(",") if ":" in p]
        if opts["sizes"]:
            try:
                request["sizes"] = [int(s) for s in opts["sizes"].split(",")]
            except ValueError:
                raise CommandError("--sizes: expected whole numbers of bytes, comma-separated") from None
        for key in ("iterations", "rounds", "seed"):
            if opts[key] is not None:
                request[key] = opts[key]
        if opts["stage_timeout"]:
            timeouts = waiting.assignments(opts["stage_timeout"], "--stage-timeout", "STAGE=SECONDS")
            try:
                request["timeouts"] = {stage: float(seconds) for stage, seconds in timeouts.items()}
            except ValueError:
                raise CommandError("--stage-timeout: expected STAGE=SECONDS") from None
        if opts["baseline"]:
            request["baseline"] = opts["baseline"]
        if opts["confirm_after"] is not None:
            request["confirm_after_s"] = opts["confirm_after"]
        sweep = waiting.request_or_error(**request)
        if not opts["wait"]:
            if opts["json"]:
                self.stdout.write(json.dumps(documents.sweep_json(sweep, with_pairs=False)))
            else:
                self.stdout.write(f"sweep {sweep.pk} requested")
            return
        self._wait_and_report(sweep, opts)

    def _idle(self, opts):
        if opts["nodes"] or opts["pairs"]:
            raise CommandError("--idle chooses its nodes from Slurm's idle ones: no --nodes or --pairs")
        if opts["max_nodes"] is not None and not 2 <= opts["max_nodes"] <= idle.MAX_NODES:
            raise CommandError(f"--max-nodes: expected 2..{idle.MAX_NODES}")
        if opts["rounds"] is not None and not 1 <= opts["rounds"] <= idle.MAX_NODES - 1:
            raise CommandError(f"--rounds: expected 1..{idle.MAX_NODES - 1}")
        try:
            sweep = idle.start(opts["max_nodes"], max_rounds=opts["rounds"])
        except (idle.IdleSweepError, slurm.SlurmError) as exc:
            raise CommandError(f"idle sweep: {exc}") from None
        hold = sweep.params["idle_hold"]
        self.stderr.write(
            f"sweep {sweep.pk}: {len(hold['slurm_nodes'])} idle nodes held by reservation {hold['reservation']} "
            f"for at most {hold['minutes']} min"
        )
        if not opts["wait"]:
            self.stdout.write(f"sweep {sweep.pk} requested")
            return
        try:
            self._wait_and_report(sweep, opts)
        finally:
            idle.release_hold(sweep)  # any end (a timeout, ^C): the nodes go back to Slurm now

    def _wait_and_report(self, sweep, opts):
        show = None
        if not opts["json"] and sys.stderr.isatty():
            show = lambda line: self.stderr.write(line)
        ended = waiting.wait_or_cancel(sweep, opts["timeout"], show)
        report = documents.sweep_json(sweep)
        if opts["json"]:
            self.stdout.write(json.dumps(report))
        else:
            self.stdout.write(textmatrix.render(report))
            if not ended:
                self.stdout.write(f"gave up after {opts['timeout']:.0f}s; sweep {sweep.pk} cancelled")
        sys.exit(waiting.exit_code(sweep))
