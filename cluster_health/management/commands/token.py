"""API tokens: `token issue USER --scope read|operate --expires-in DAYS [--name NAME]`, `token list [--json]`,
`token revoke ID|NAME`.

The raw token is printed once, by `issue`, and only its hash is stored: a lost
token cannot be shown again, only revoked and issued anew. A `read` token may
only read the API; an `operate` token has its user's permissions.
"""

from __future__ import annotations

import json
from datetime import timedelta

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError
from django.utils import timezone

from cluster_health.models import ApiToken

MAX_DAYS = 3650


def token_dict(token: ApiToken, now=None) -> dict:
    return {
        "id": token.pk,
        "name": token.name,
        "user": token.user.get_username(),
        "scope": token.scope,
        "created": token.created.isoformat(),
        "expires": token.expires and token.expires.isoformat(),
        "expired": token.is_expired(now),
        "last_used": token.last_used and token.last_used.isoformat(),
    }


class Command(BaseCommand):
    help = "Issue (printed once), list or revoke API tokens for the JSON API and `agents check --server`."

    def add_arguments(self, parser):
        sub = parser.add_subparsers(dest="action", required=True)
        issue = sub.add_parser("issue", help="create a token and print it once")
        issue.add_argument("username", metavar="USER")
        issue.add_argument(
            "--scope",
            choices=(ApiToken.READ, ApiToken.OPERATE),
            required=True,
            help="read: GET only; operate: also start and cancel sweeps, retire and activate nodes (if USER may)",
        )
        issue.add_argument(
            "--expires-in", type=int, required=True, metavar="DAYS", help=f"days until it is refused (1..{MAX_DAYS})"
        )
        issue.add_argument("--name", help="what the token is for, unique (default: USER-SCOPE-DATE)")
        listing = sub.add_parser("list", help="every token, without its value")
        listing.add_argument("--json", action="store_true")
        revoke = sub.add_parser("revoke", help="delete a token: it is refused at once")
        revoke.add_argument("token", metavar="ID|NAME")

    def handle(self, *args, action, **opts):
        if action == "issue":
            self._issue(opts["username"], opts["scope"], opts["expires_in"], opts["name"])
        elif action == "list":
            self._list(opts["json"])
        else:
            self._revoke(opts["token"])

    def _issue(self, username: str, scope: str, days: int, name: str | None) -> None:
        if not 1 <= days <= MAX_DAYS:
            raise CommandError(f"--expires-in: {days} is outside 1..{MAX_DAYS}")
        user = get_user_model().objects.filter(username=username).first()
        if user is None:
            raise CommandError(f"USER: no user {username!r} (create one with manage.py bootstrap_user)")
        now = timezone.now()
        name = name or f"{username}-{scope}-{now:%Y%m%d-%H%M%S}"
        if ApiToken.objects.filter(name=name).exists():
            raise CommandError(f"--name: a token named {name!r} exists already (revoke it or choose another name)")
        token, raw = ApiToken.issue(user, name, scope=scope, expires=now + timedelta(days=days))
        self.stderr.write(
            f"token {token.pk} {name!r} for {username}, scope {scope}, expires {token.expires:%Y-%m-%d %H:%M %Z}; "
            "it is shown only now:"
        )
        self.stdout.write(raw)

    def _list(self, as_json: bool) -> None:
        now = timezone.now()
        tokens = [token_dict(t, now) for t in ApiToken.objects.select_related("user").order_by("pk")]
        if as_json:
            self.stdout.write(json.dumps({"tokens": tokens}, indent=2))
            return
        if not tokens:
            self.stdout.write("no API tokens")
            return
        self.stdout.write(f"{'id':>5}  {'name':30}  {'user':16}  {'scope':8}  {'expires':25}  last used")
        for t in tokens:
            expires = (t["expires"] or "never") + (" (expired)" if t["expired"] else "")
            self.stdout.write(
                f"{t['id']:>5}  {t['name']:30}  {t['user']:16}  {t['scope']:8}  {expires:25}  {t['last_used'] or '-'}"
            )

    def _revoke(self, ref: str) -> None:
        matches = list(ApiToken.objects.filter(pk=int(ref)) if ref.isdigit() else ApiToken.objects.filter(name=ref))
        if not matches:
            raise CommandError(f"ID|NAME: no token {ref!r} (manage.py token list)")
        if len(matches) > 1:
            ids = ", ".join(str(t.pk) for t in matches)
            raise CommandError(f"ID|NAME: several tokens are named {ref!r} (ids {ids}): revoke one by its id")
        (token,) = matches
        token.delete()
        self.stdout.write(f"token {token.name!r} revoked")
