"""Create or update a login, optionally an operator (may start sweeps) or a superuser.

Used by `scripts/run` to print a working login, and by deployments' first start.
The password comes from standard input (`--password-stdin`) or an environment
variable (`--password-env VAR`), never from the command line, where `ps` shows
it to every user of the machine; it must pass AUTH_PASSWORD_VALIDATORS.
"""

from __future__ import annotations

import getpass
import os
import sys

from django.contrib.auth import get_user_model, password_validation
from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError

from cluster_health.defaults import ensure_operators_group

ARGV_REFUSED = (
    "--password: refused, a password on the command line is visible to every user of the machine (ps); "
    "pipe it in with --password-stdin, or name a variable holding it with --password-env VAR"
)


class Command(BaseCommand):
    help = (
        "Create or update a user, its password read from standard input (--password-stdin) or a variable "
        "(--password-env VAR); --operator lets it start sweeps, --superuser opens the admin."
    )
    stealth_options = ("stdin",)

    def add_arguments(self, parser):
        parser.add_argument("--username", required=True)
        source = parser.add_mutually_exclusive_group()
        source.add_argument(
            "--password-stdin", action="store_true", help="read the password from the first line of standard input"
        )
        source.add_argument("--password-env", metavar="VAR", help="read the password from environment variable VAR")
        source.add_argument("--password", help="refused: use --password-stdin or --password-env")
        parser.add_argument("--email", default="")
        parser.add_argument("--operator", action="store_true", help="member of the operators group")
        parser.add_argument("--superuser", action="store_true", help="staff and superuser (admin site)")

    def handle(self, *args, username, email, operator, superuser, **options):
        password = self._password(options)
        user_model = get_user_model()
        user = user_model.objects.filter(username=username).first()
        created = user is None
        if user is None:
            user = user_model(username=username, email=email)
        try:
            password_validation.validate_password(password, user)
        except ValidationError as exc:
            raise CommandError("password: " + " ".join(exc.messages)) from None
        user.set_password(password)
        if superuser:
            user.is_staff = user.is_superuser = True
        user.save()
        if operator:
            group = ensure_operators_group()
            if not group.permissions.filter(codename="start_sweep").exists():
                raise CommandError("the start_sweep permission does not exist: run `manage.py migrate` first")
            user.groups.add(group)
        role = "superuser" if superuser else ("operator" if operator else "viewer")
        self.stdout.write(f"{'created' if created else 'updated'} {role} {username}")

    def _password(self, options) -> str:
        if options.get("password") is not None:
            raise CommandError(ARGV_REFUSED)
        if options["password_stdin"]:
            stdin = options.get("stdin") or sys.stdin
            if stdin.isatty():  # typed: not echoed
                password = getpass.getpass("Password: ")
            else:
                password = stdin.readline().rstrip("\r\n")
            if not password:
                raise CommandError("--password-stdin: standard input holds no password")
            return password
        if options["password_env"]:
            name = options["password_env"]
            password = os.environ.get(name, "")
            if not password:
                raise CommandError(f"--password-env: environment variable {name} is unset or empty")
            return password
        raise CommandError("the password: give --password-stdin or --password-env VAR")
