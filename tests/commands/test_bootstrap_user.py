"""manage.py bootstrap_user: the password from standard input or a variable, never argv, checked by the validators."""

from __future__ import annotations

import io

import pytest
from django.contrib.auth import authenticate
from django.contrib.auth.models import User
from django.core.management import CommandError, call_command
from django.db import connection

from devtools import devstack, services
from tests.support.stack import database_url

pytestmark = pytest.mark.django_db

STRONG = "correct-horse-battery-47"


def bootstrap(*args, stdin: str = "") -> str:
    out = io.StringIO()
    call_command("bootstrap_user", *args, stdin=io.StringIO(stdin), stdout=out)
    return out.getvalue()


def test_it_creates_an_operator_with_the_password_from_standard_input():
    assert "created operator alice" in bootstrap(
        "--username", "alice", "--password-stdin", "--operator", stdin=STRONG + "\n"
    )
    user = authenticate(username="alice", password=STRONG)
    assert user is not None and user.has_perm("cluster_health.start_sweep")


def test_it_reads_the_password_from_the_named_environment_variable(monkeypatch):
    monkeypatch.setenv("ADMIN_PASSWORD", STRONG)
    bootstrap("--username", "root", "--password-env", "ADMIN_PASSWORD", "--superuser")
    assert authenticate(username="root", password=STRONG).is_superuser


def test_it_refuses_a_password_on_the_command_line_and_creates_nobody():
    with pytest.raises(CommandError, match="visible to every user.*--password-stdin"):
        bootstrap("--username", "alice", "--password", STRONG)
    assert not User.objects.exists()


@pytest.mark.parametrize(
    "password, message",
    [
        ("short1", "too short"),
        ("password123", "too common"),
        ("alice-smith", "too similar to the username"),
    ],
)
def test_it_refuses_a_weak_password_with_the_validators_message(password, message):
    with pytest.raises(CommandError, match=message):
        bootstrap("--username", "alice-smith", "--password-stdin", stdin=password)
    assert not User.objects.exists()


def test_it_refuses_to_run_without_a_password_source_or_with_an_empty_one(monkeypatch):
    with pytest.raises(CommandError, match="--password-stdin or --password-env"):
        bootstrap("--username", "alice")
    with pytest.raises(CommandError, match="standard input holds no password"):
        bootstrap("--username", "alice", "--password-stdin", stdin="\n")
    monkeypatch.delenv("UNSET_PASSWORD", raising=False)
    with pytest.raises(CommandError, match="UNSET_PASSWORD is unset"):
        bootstrap("--username", "alice", "--password-env", "UNSET_PASSWORD")


def test_it_changes_an_existing_users_password():
    bootstrap("--username", "alice", "--password-stdin", stdin=STRONG)
    assert "updated viewer alice" in bootstrap("--username", "alice", "--password-stdin", stdin="another-long-one-93")
    assert authenticate(username="alice", password="another-long-one-93") is not None
    assert authenticate(username="alice", password=STRONG) is None


@pytest.mark.django_db(transaction=True)
def test_the_dev_stack_creates_its_admin_login_without_the_password_in_argv(tmp_path):
    env = services.python_env(
        DJANGO_SETTINGS_MODULE="tests.settings",
        DATABASE_URL=database_url(connection.settings_dict),
        CLUSTER_HEALTH_VAR_DIR=str(tmp_path),
    )
    env.pop("CLUSTER_HEALTH_PRODUCTION", None)
    password, run = devstack.create_admin_login(env)
    assert run.returncode == 0, run.stderr
    assert not any(password in arg for arg in run.args)
    admin = authenticate(username="admin", password=password)
    assert admin is not None and admin.is_superuser and admin.has_perm("cluster_health.start_sweep")
