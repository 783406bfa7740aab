"""Launch rehearsal: reproduce a job's rendezvous from every node and say which ranks would hang.

Exit codes as for ``sweep``: 0 every rank would join, 2 some would hang, 3 unknown.
"""

from __future__ import annotations

import json
import sys

from django.core.management.base import BaseCommand

from agents import contract
from cluster_health.core import textmatrix
from cluster_health.shapes import documents
from cluster_health.sweeps import waiting


class Command(BaseCommand):
    help = "Rehearse a job's launch (master, MASTER_PORT, backend, interface variables) on its nodes."

    def add_arguments(self, parser):
        parser.add_argument("--master", required=True, help="the node the job uses as MASTER_ADDR (rank 0)")
        parser.add_argument("--port", type=int, required=True, help="the job's MASTER_PORT")
        parser.add_argument(
            "--nodes", help="comma-separated nodes of the job (default: every active node; an offline one fails it)"
        )
        parser.add_argument("--backend", default="gloo", choices=contract.BACKENDS)
        waiting.add_assignments_option(
            parser, "--env", "NAME=VALUE", "launch variable the job sets, e.g. GLOO_SOCKET_IFNAME=eth0 (repeatable)"
        )
        parser.add_argument("--timeout", type=float, default=300.0)
        parser.add_argument("--json", action="store_true")

    def handle(self, *args, **opts):
        request = {
            "kind": "preflight",
            "backend": opts["backend"],
            "master": opts["master"],
            "master_port": opts["port"],
            "env": waiting.assignments(opts["env"], "--env", "NAME=VALUE"),
        }
        if opts["nodes"]:
            request["nodes"] = waiting.node_names(opts["nodes"])
        sweep = waiting.request_or_error(**request)
        waiting.wait_or_cancel(sweep, opts["timeout"])
        report = documents.sweep_json(sweep)
        self.stdout.write(json.dumps(report) if opts["json"] else textmatrix.render(report))
        sys.exit(waiting.exit_code(sweep))
