"""Create or update a login, optionally an operator (may start sweeps) or a superuser.

Used by `scripts/run` to print a working login, and by deployments' first start.
"""

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from cluster_health.defaults import ensure_operators_group


class Command(BaseCommand):
    help = "Create or update a user; --operator lets it start sweeps, --superuser opens the admin."

    def add_arguments(self, parser):
        parser.add_argument("--username", required=True)
        parser.add_argument("--password", required=True, help="at least 8 characters")
        parser.add_argument("--email", default="")
        parser.add_argument("--operator", action="store_true", help="member of the operators group")
        parser.add_argument("--superuser", action="store_true", help="staff and superuser (admin site)")

    def handle(self, *args, username, password, email, operator, superuser, **options):
        if len(password) < 8:
            raise CommandError("--password: use at least 8 characters")
        user_model = get_user_model()
        user, created = user_model.objects.get_or_create(username=username, defaults={"email": email})
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
