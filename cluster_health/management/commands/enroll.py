"""Give nodes their signing keys: `manage.py enroll NAME [NAME ...] --out DIR` writes DIR/NAME.key (0600).

Copy each key file to its node (for example /etc/cluster-health/agent.key) and start
the agent with `--key-file`. `--rotate` replaces a node's key, revoking the old one
at once; `--revoke` revokes without a replacement (the node is shut out): its key, and
its broker user on the broker at REDIS_URL (deleted, its open connections closed).

With `--broker URL` (the broker's URL without credentials), each node also gets a broker
user of its own: DIR/NAME.acl is its Redis ACL line (cluster_health.queues.acl) with a
fresh password, for the broker's aclfile, and DIR/NAME.broker its broker URL with that
user and password, for the agent's `--broker-file`. Both 0600.
"""

from __future__ import annotations

import os
import secrets
import urllib.parse
from pathlib import Path

import redis
from django.conf import settings
from django.core.management.base import BaseCommand, CommandError
from django.db import transaction

from agents import broker, contract, signing
from cluster_health.models import AgentKey
from cluster_health.queues import acl


class Command(BaseCommand):
    help = "Create a signing key per node and write DIR/NAME.key (mode 0600); --rotate or --revoke existing keys."

    def add_arguments(self, parser):
        parser.add_argument("names", nargs="+", metavar="NAME", help="node names (the agents' --name)")
        parser.add_argument("--out", help="directory for the key files (created 0700 if missing)")
        parser.add_argument("--rotate", action="store_true", help="replace existing keys (the old ones stop at once)")
        parser.add_argument(
            "--revoke", action="store_true", help="revoke the nodes' keys and delete their broker users; write nothing"
        )
        parser.add_argument(
            "--broker",
            metavar="URL",
            help="also write DIR/NAME.acl and DIR/NAME.broker: a broker user per node (URL without credentials)",
        )
        parser.add_argument(
            "--if-missing",
            action="store_true",
            help="skip nodes that have a key and its file in DIR; rotate the others (compose)",
        )

    def handle(self, *args, names, out, rotate, revoke, if_missing, broker, **options):
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
            self._remove_broker_users(names)
            return
        if not out:
            raise CommandError("--out DIR: where to write the key files")
        base = _broker_base(broker) if broker else None
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
            if base is not None:
                _write_broker_user(directory, name, base)
                self.stdout.write(f"{name}: broker user {acl.user_name(name)} written to {name}.acl and {name}.broker")

    def _remove_broker_users(self, names: list[str]) -> None:
        """Delete each node's broker user on the broker, now: its open connections are closed, and it can
        log in no more (a revoked key alone would leave it reading its queue and sending to ingest)."""
        client = broker.redis_client(settings.REDIS_URL, socket_connect_timeout=5, socket_timeout=5)
        users = " ".join(acl.user_name(n) for n in names)
        try:
            for name in names:
                user = acl.user_name(name)
                if client.acl_getuser(user) is None:
                    self.stdout.write(f"{name}: no broker user {user} on the broker")
                    continue
                killed = client.execute_command("CLIENT", "KILL", "USER", user)
                client.acl_deluser(user)
                self.stdout.write(f"{name}: broker user {user} deleted, {killed} connection(s) closed")
            try:
                client.acl_save()
            except redis.ResponseError:  # users given as --user options or in redis.conf, not an aclfile
                self.stderr.write(f"the broker has no ACL file: remove {users} where its users are configured")
        except redis.RedisError as exc:
            raise CommandError(
                f"keys revoked, but the broker users were not removed ({broker.redact(str(exc))}): "
                f"run ACL DELUSER {users} on the broker"
            ) from None
        finally:
            client.close()


def _broker_base(url: str) -> urllib.parse.SplitResult:
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("redis", "rediss") or not parts.hostname:
        raise CommandError("--broker: expected redis://HOST:PORT/DB or rediss://...")
    if parts.username or parts.password:
        raise CommandError("--broker: give the URL without credentials (each node gets its own)")
    return parts


def _write_broker_user(directory: Path, name: str, base: urllib.parse.SplitResult) -> None:
    password = secrets.token_urlsafe(32)
    netloc = f"{acl.user_name(name)}:{password}@{base.netloc}"
    _write_private(directory / f"{name}.acl", f"user {acl.agent_rule(name, password)}\n")
    _write_private(directory / f"{name}.broker", urllib.parse.urlunsplit(base._replace(netloc=netloc)) + "\n")


def _write_private(path: Path, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.chmod(path, 0o600)


def _has_key(name: str, path: Path) -> bool:
    """Whether the node's key in use is the one in this file."""
    try:
        key = signing.load_key_file(path, name)
    except signing.SignatureError:
        return False
    return AgentKey.objects.filter(node_name=name, key_id=key.key_id, revoked_at__isnull=True).exists()
