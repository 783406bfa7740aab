"""Settings come from the environment; production refuses unsafe defaults; check --deploy is clean."""

import subprocess
import sys

import pytest

from devtools.devstack import run_to_end
from devtools.services import python_env

GOOD_KEY = "k3y-" + "abcdefghijklmnopqrstuvwxyz0123456789ABCDEFGHIJKLMNOP"
PRODUCTION = {
    "CLUSTER_HEALTH_PRODUCTION": "1",
    "SECRET_KEY": GOOD_KEY,
    "ALLOWED_HOSTS": "health.example.org",
    "REDIS_URL": "redis://127.0.0.1:1/0",
    "DJANGO_SETTINGS_MODULE": "cluster_health.settings",
    "CLUSTER_HEALTH_METRICS_TOKEN": "metrics-" + "t" * 24,
}


def settings_env(env: dict) -> dict:
    """This process's environment less every setting the tests choose, then ``env``'s settings."""
    unset = (*PRODUCTION, "DEBUG", "DJANGO_ALLOW_ASYNC_UNSAFE")
    base = {k: v for k, v in python_env().items() if k not in unset}
    return {**base, "DJANGO_SETTINGS_MODULE": "cluster_health.settings", **env}


def run_django(code: str, env: dict) -> subprocess.CompletedProcess:
    return run_to_end([sys.executable, "-c", "import django; django.setup(); " + code], env=settings_env(env))


def manage(args: list[str], env: dict) -> subprocess.CompletedProcess:
    return run_to_end([sys.executable, "manage.py", *args], env=settings_env(env), timeout=120)


@pytest.mark.parametrize("missing", ["SECRET_KEY", "ALLOWED_HOSTS", "REDIS_URL", "CLUSTER_HEALTH_METRICS_TOKEN"])
def test_it_refuses_to_start_in_production_without(missing):
    env = {k: v for k, v in PRODUCTION.items() if k != missing}
    out = run_django("print('started')", env)
    assert out.returncode != 0
    assert "started" not in out.stdout
    assert f"{missing}: required" in out.stderr and "when CLUSTER_HEALTH_PRODUCTION=1" in out.stderr


def test_it_refuses_a_placeholder_secret_key_in_production():
    out = run_django("print('started')", {**PRODUCTION, "SECRET_KEY": "change-me-" + "x" * 60})
    assert out.returncode != 0
    assert "SECRET_KEY: use at least 50 random characters" in out.stderr


def test_it_names_the_variable_with_a_bad_value():
    out = run_django("print('started')", {"CLUSTER_HEALTH_REAPER_INTERVAL_S": "soon"})
    assert out.returncode != 0
    assert "CLUSTER_HEALTH_REAPER_INTERVAL_S: expected a number, got 'soon'" in out.stderr
    out = run_django("print('started')", {"DEBUG": "maybe"})
    assert "DEBUG: expected a boolean" in out.stderr


def test_it_reads_database_url(tmp_path):
    db = tmp_path / "x.sqlite3"
    out = run_django(
        "from django.conf import settings; d = settings.DATABASES['default']; print(d['ENGINE'], d['NAME'])",
        {"DATABASE_URL": f"sqlite:///{db}"},
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["django.db.backends.sqlite3", str(db)]
    out = run_django(
        "from django.conf import settings; d = settings.DATABASES['default']; print(d['ENGINE'], d['NAME'], d['HOST'])",
        {"DATABASE_URL": "postgres://ops@db.internal:5432/health"},
    )
    assert out.stdout.split() == ["django.db.backends.postgresql", "health", "db.internal"]


def test_it_reads_secrets_from_files(tmp_path):
    key_file = tmp_path / "secret"
    key_file.write_text(GOOD_KEY + "\n")
    env = {k: v for k, v in PRODUCTION.items() if k != "SECRET_KEY"}
    env["SECRET_KEY_FILE"] = str(key_file)
    out = run_django(f"from django.conf import settings; print(settings.SECRET_KEY == {GOOD_KEY!r})", env)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "True"


def test_it_passes_check_deploy_in_production(tmp_path):
    env = {**PRODUCTION, "CLUSTER_HEALTH_VAR_DIR": str(tmp_path)}
    out = manage(["check", "--deploy", "--fail-level", "WARNING"], env)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "no issues" in out.stdout


def test_it_is_json_only_for_celery():
    from django.conf import settings

    from cluster_health.celery import app

    assert settings.CELERY_ACCEPT_CONTENT == ["json"]
    assert app.conf.accept_content == ["json"]
    assert app.conf.task_serializer == "json"
    assert app.conf.result_backend is None


def test_it_refuses_unsigned_agents_in_production():
    out = run_django("print('started')", {**PRODUCTION, "CLUSTER_HEALTH_ALLOW_UNSIGNED_AGENTS": "1"})
    assert out.returncode != 0
    assert "CLUSTER_HEALTH_ALLOW_UNSIGNED_AGENTS: refused" in out.stderr


def test_it_warns_loudly_when_it_runs_on_the_public_development_secret_key():
    """Outside production mode a missing SECRET_KEY falls back to one printed in this repository: sessions
    and agent keys sealed with it are anyone's. Every process says so at start."""
    out = run_django("print('started')", {})
    assert "started" in out.stdout
    assert "SECRET_KEY is the public development key" in out.stderr, out.stderr
    out = run_django("print('started')", {"SECRET_KEY": GOOD_KEY})
    assert "started" in out.stdout and "SECRET_KEY" not in out.stderr
