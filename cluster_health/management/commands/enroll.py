"""Give nodes their signing keys: `manage.py enroll NAME [NAME ...] --out DIR` writes DIR/NAME.key (0600).

Copy each key file to its node (for example /etc/cluster-health/agent.key) and start
the agent with `--key-file`. `--rotate` replaces a node's key, revoking the old one
at once; `--revoke` revokes without a replacement (the node is shut out).
"""

from __future__ import annotations

import os
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError
from django.db import transaction

from agents import contract, signing
from cluster_health.models import AgentKey


class Command(BaseCommand):
    help = "Create a signing key per node and write DIR/NAME.key (mode 0600); --rotate or --revoke existing keys."

    def add_arguments(self, parser):
        parser.add_argument("names", nargs="+", metavar="NAME", help="node names (the agents' --name)")
        parser.add_argument("--out", help="directory for the key files (created 0700 if missing)")
        parser.add_argument("--rotate", action="store_true", help="replace existing keys (the old ones stop at once)")
        parser.add_argument("--revoke", action="store_true", help="revoke the nodes' keys; write nothing")
        parser.add_argument(
            "--if-missing",
            action="store_true",
            help="skip nodes that have a key and its file in DIR; rotate the others (compose)",
        )

    def handle(self, *args, names, out, rotate, revoke, if_missing, **options):
        try:
            names = [contract.check_node_name(n, "NAME") for n in names]
        except contract.ContractError as exc:
            raise CommandError(str(exc)) from None
        if revoke:
            for name in names:
                count = AgentKey.objects.filter(node_name=name, revoked_at__isnull=True).count()
                for key in AgentKey.objects.filter(node_name=name, revoked_at__isnull=True):
                    key.revoke()
                self.stdout.write(f"{name}: {count} key(s) revoked")
            return
        if not out:
            raise CommandError("--out DIR: where to write the key files")
        directory = Path(out)
        directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        for name in names:
            path = directory / f"{name}.key"
            with transaction.atomic():
                if if_missing and _has_key(name, path):
                    self.stdout.write(f"{name}: has a key, skipped")
                    continue
                try:
                    row, key = AgentKey.enroll(name, rotate=rotate or if_missing)
                except ValueError as exc:
                    raise CommandError(f"{exc} (--rotate)") from None
                signing.write_key_file(path, key)
            self.stdout.write(f"{name}: key {row.key_id} written to {os.fspath(path)}")


def _has_key(name: str, path: Path) -> bool:
    """Whether the node's key in use is the one in this file."""
    try:
        key = signing.load_key_file(path, name)
    except signing.SignatureError:
        return False
    return AgentKey.objects.filter(node_name=name, key_id=key.key_id, revoked_at__isnull=True).exists()
