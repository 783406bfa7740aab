"""Django settings for cluster-health, read only from environment variables.

Development defaults let `scripts/run` work on a fresh machine; production mode
(CLUSTER_HEALTH_PRODUCTION=1) refuses to start without SECRET_KEY, ALLOWED_HOSTS
and REDIS_URL, and turns on the secure-cookie, HSTS and SSL settings that
`manage.py check --deploy` asks for.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import dj_database_url
from django.core.exceptions import ImproperlyConfigured

from agents import broker
from cluster_health.env import envbool, envfloat, envint, envlist, envpins, envstr

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = Path(envstr("CLUSTER_HEALTH_VAR_DIR", str(BASE_DIR / "var")))

PRODUCTION = envbool("CLUSTER_HEALTH_PRODUCTION", False)
# Printed in this repository: what it signs (sessions) and seals (agent keys) is anyone's. Warned of at start.
DEVELOPMENT_SECRET_KEY = "dev-only-insecure-key-cluster-health-do-not-use-in-production"
DEBUG = envbool("DEBUG", False)
if PRODUCTION and DEBUG:
    raise ImproperlyConfigured("DEBUG: must be off when CLUSTER_HEALTH_PRODUCTION=1")


def _required(name: str) -> str:
    val = envstr(name)
    if not val:
        raise ImproperlyConfigured(f"{name}: required when CLUSTER_HEALTH_PRODUCTION=1")
    return val


if PRODUCTION:
    SECRET_KEY = _required("SECRET_KEY")
    if len(SECRET_KEY) < 50 or len(set(SECRET_KEY)) < 5 or SECRET_KEY.startswith("change-me"):
        raise ImproperlyConfigured("SECRET_KEY: use at least 50 random characters in production")
    ALLOWED_HOSTS = envlist("ALLOWED_HOSTS")
    if not ALLOWED_HOSTS:
        raise ImproperlyConfigured("ALLOWED_HOSTS: required when CLUSTER_HEALTH_PRODUCTION=1")
    REDIS_URL = _required("REDIS_URL")
else:
    SECRET_KEY = envstr("SECRET_KEY") or DEVELOPMENT_SECRET_KEY
    ALLOWED_HOSTS = envlist("ALLOWED_HOSTS", ["localhost", "127.0.0.1", "[::1]", "testserver"])
    REDIS_URL = envstr("REDIS_URL", "redis://127.0.0.1:6379/0")

CSRF_TRUSTED_ORIGINS = envlist("CSRF_TRUSTED_ORIGINS")

# Redis over TLS (rediss://): the CA, and a client certificate if the broker asks for one, from
# CLUSTER_HEALTH_REDIS_CA_FILE / _CERT_FILE / _KEY_FILE (agents.broker), for every Redis client below.
try:
    REDIS_TLS = broker.tls_options(REDIS_URL)
except broker.BrokerConfigError as exc:
    raise ImproperlyConfigured(str(exc)) from None

INSTALLED_APPS = [
    "daphne",
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "channels",
    "django_celery_beat",
    "cluster_health",
    "cluster_health.actions",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "cluster_health.web.csp.ContentSecurityPolicyMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "cluster_health.web.ratelimit.ActionRateLimitMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "cluster_health.urls"
ASGI_APPLICATION = "cluster_health.asgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
            "builtins": ["cluster_health.web.times", "cluster_health.web.operator_tags"],
        },
    },
]

DATABASE_URL = envstr("DATABASE_URL") or f"sqlite:///{VAR_DIR / 'cluster-health.sqlite3'}"
try:
    DATABASES = {"default": dj_database_url.parse(DATABASE_URL, conn_max_age=envint("DB_CONN_MAX_AGE", 0, 0))}
except Exception as exc:  # dj_database_url raises several types for a bad URL
    raise ImproperlyConfigured(f"DATABASE_URL: cannot parse {DATABASE_URL!r}: {exc}") from exc
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    # Several processes (web, Celery worker, beat) write to one file: wait for the lock
    # instead of failing, and use WAL so readers never block the writer.
    DATABASES["default"].setdefault("OPTIONS", {}).update(
        {
            "timeout": 30,
            "transaction_mode": "IMMEDIATE",
            "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
        }
    )
    DATABASES["default"]["TEST"] = {"NAME": envstr("CLUSTER_HEALTH_TEST_SQLITE") or None}
# How long a server worker process keeps its database connection between tasks (seconds;
# 0: a new one per task). Every agent message is a task, and opening a PostgreSQL connection
# cost more than applying the message. The web process keeps DB_CONN_MAX_AGE (default 0).
WORKER_DB_CONN_MAX_AGE = envint("CLUSTER_HEALTH_WORKER_DB_CONN_MAX_AGE", 300, 0)
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
]
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "overview"
LOGOUT_REDIRECT_URL = "login"

LANGUAGE_CODE = "en-us"
TIME_ZONE = envstr("TIME_ZONE", "UTC")
USE_I18N = False
USE_TZ = True
# One date format on every page and in the admin: 24-hour, ISO order, the zone named (cluster_health/web/times.py).
FORMAT_MODULE_PATH = ["cluster_health.web.formats"]

STATIC_URL = "static/"
STATIC_ROOT = VAR_DIR / "static"
STATICFILES_DIRS = (
    [BASE_DIR / "cluster_health" / "static_build"] if (BASE_DIR / "cluster_health" / "static_build").is_dir() else []
)
STATICFILES_FINDERS = [
    "django.contrib.staticfiles.finders.FileSystemFinder",
    "django.contrib.staticfiles.finders.AppDirectoriesFinder",
    "cluster_health.web.staticfinders.PlotlyFinder",  # plotly.min.js from the pinned plotly package
]
# Serve static files from the ASGI app itself (clusters are often offline and have no CDN).
SERVE_STATIC = envbool("CLUSTER_HEALTH_SERVE_STATIC", True)

# Channels: the same Redis carries the channel layer, so Celery ingest can group_send.
CHANNEL_LAYERS = {
    "default": {
        "BACKEND": "channels_redis.core.RedisChannelLayer",
        # A consumer waits for messages in a 5 s BZPOPMIN; redis-py's default 5 s socket
        # timeout would end that wait with an error and drop every idle WebSocket.
        "CONFIG": {
            "hosts": [{"address": REDIS_URL, "socket_timeout": 15, **REDIS_TLS}],
            "capacity": 1500,
            "expiry": 30,
        },
    }
}

# The cache holds login-failure counts; Redis, so every web process sees the same counts.
CACHES = {
    "default": {"BACKEND": "django.core.cache.backends.redis.RedisCache", "LOCATION": REDIS_URL, "OPTIONS": REDIS_TLS}
}

# Celery: JSON only, no result backend (the UI and CLI read rows, never Celery results).
CELERY_BROKER_URL = REDIS_URL
CELERY_BROKER_USE_SSL = REDIS_TLS or None  # kombu alone would take rediss:// without checking the certificate
CELERY_RESULT_BACKEND = None
CELERY_TASK_SERIALIZER = "json"
CELERY_RESULT_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_TASK_DEFAULT_QUEUE = "server"
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 4
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
CELERY_BROKER_TRANSPORT_OPTIONS = {"visibility_timeout": 3600}
CELERY_BEAT_SCHEDULER = "django_celery_beat.schedulers:DatabaseScheduler"
CELERY_TASK_ALWAYS_EAGER = False
CELERY_TIMEZONE = TIME_ZONE

# Product settings.
NODE_ONLINE_AFTER_S = envfloat("CLUSTER_HEALTH_ONLINE_AFTER_S", 20.0, 1.0, 3600.0)
# An active node silent this long is flagged on the overview; it still fails sweeps until retired.
STALE_NODE_DAYS = envint("CLUSTER_HEALTH_STALE_NODE_DAYS", 7, 1, 3650)
REAPER_INTERVAL_S = envfloat("CLUSTER_HEALTH_REAPER_INTERVAL_S", 3.0, 0.5, 600.0)
# How long a dead ingest drainer holds its shard before another applies its batch again;
# longer than one batch's transaction can take.
INGEST_DRAIN_LOCK_S = envfloat("CLUSTER_HEALTH_INGEST_DRAIN_LOCK_S", 30.0, 1.0, 3600.0)
DEGRADED_RATIO = envfloat("CLUSTER_HEALTH_DEGRADED_RATIO", 0.9, 0.0, 1.0)
# The confirmation pass (cluster_health/sweeps/confirming.py): "on" (default) probes every pair that
# is not ok again before the verdict. "off" is for comparison only (benchmarks/false_alarms.py times
# a sweep without it): no pair is confirmed then, so no network sweep drains a node.
CONFIRMATION = envstr("CLUSTER_HEALTH_CONFIRMATION", "on").strip().lower()
if CONFIRMATION not in ("on", "off"):
    raise ImproperlyConfigured(f"CLUSTER_HEALTH_CONFIRMATION: expected on or off, got {CONFIRMATION!r}")
# How long the confirmation pass waits after the planned rounds before it looks again, so that a burst
# (a checkpoint written, a neighbour's job starting) can pass first; a sweep's request may say otherwise
# (``confirm_after_s``, ``sweep --confirm-after S``). The pass starts at the reaper's first tick after it.
CONFIRM_AFTER_S = envfloat("CLUSTER_HEALTH_CONFIRM_AFTER_S", 0.0, 0.0, 600.0)
# How node names map to groups (rack, leaf, rail) for segment findings: a regex whose first
# matching group is the group; unset, the name up to its last '-', '_' or '.' (or without trailing digits).
GROUP_PATTERN = envstr("CLUSTER_HEALTH_GROUP_PATTERN")
# Sweeps over more nodes than this show their group matrix (group x group) on the overview and
# sweep pages, with a drill-down into one group pair, instead of the node matrix: a node matrix of
# 1,024 nodes is 6 MB and about a second to draw; one of 4,096 would be 100 MB (docs/DASHBOARD.md).
NODE_MATRIX_MAX_NODES = envint("CLUSTER_HEALTH_NODE_MATRIX_MAX_NODES", 1024, 2, 4096)
# A drill-down draws the node matrix of at most this many nodes (the two groups' members).
DRILL_DOWN_MAX_NODES = envint("CLUSTER_HEALTH_DRILL_DOWN_MAX_NODES", 1024, 2, 4096)
# A sweep that wrote at least this many pair rows has the pair table analyzed as it closes
# (PostgreSQL): autovacuum would leave its pages read with stale statistics (sweeps/statistics.py).
ANALYZE_AFTER_PAIRS = envint("CLUSTER_HEALTH_ANALYZE_AFTER_PAIRS", 10000, 1)
# The reaper vacuums the pair table once it holds this many dead row versions (sweeps/statistics.py).
VACUUM_AFTER_DEAD_PAIRS = envint("CLUSTER_HEALTH_VACUUM_AFTER_DEAD_PAIRS", 100000, 1)
NIGHTLY_SWEEP_CRON = envstr("CLUSTER_HEALTH_NIGHTLY_CRON", "30 2 * * *")
# Raw probe detail (both halves, per-size results, a passing pair's evidence): about 4.5 KB of a
# pair's 4.9 KB, 2.4 GiB a night at 1,024 nodes (docs/BENCHMARKS.md, storage).
RETENTION_DAYS = envint("CLUSTER_HEALTH_RETENTION_DAYS", 14, 1)
# Past this age a closed sweep's passing pair rows are deleted: its stored matrix keeps their
# status, busbw and latency, and every pair that did not pass keeps its row (0: never).
PAIR_ROWS_DAYS = envint("CLUSTER_HEALTH_PAIR_ROWS_DAYS", 90, 0)
REJECTED_RETENTION_DAYS = envint("CLUSTER_HEALTH_REJECTED_RETENTION_DAYS", 7, 1)
MAX_REJECTED_MESSAGES = envint("CLUSTER_HEALTH_MAX_REJECTED_MESSAGES", 100_000, 100)
# Whole-sweep and whole-fleet pages and exports (CSV, report, compare, consistency) a user may ask for a minute.
HEAVY_REQUESTS_PER_MINUTE = envint("CLUSTER_HEALTH_HEAVY_REQUESTS_PER_MINUTE", 30, 1)
# Requests that change something (any method but GET/HEAD) a user, or an address not logged in, may send a
# minute (cluster_health/web/ratelimit.py): sweeps, maintenance, acknowledgements, schedules, the admin.
ACTION_REQUESTS_PER_MINUTE = envint("CLUSTER_HEALTH_ACTION_REQUESTS_PER_MINUTE", 60, 1)
# How long the fleet's consistency table (every node's facts compared) is reused by every viewer.
CONSISTENCY_CACHE_S = envfloat("CLUSTER_HEALTH_CONSISTENCY_CACHE_S", 30.0, 0.0)
# A node whose clock differs from the server's (or the fleet's) by more than this is named in findings.
CLOCK_SKEW_TOLERANCE_S = envfloat("CLUSTER_HEALTH_CLOCK_SKEW_TOLERANCE_S", 5.0, 0.5)
# A node blamed (or a link failed) on confirmed evidence on K of the last DAYS calendar days (TIME_ZONE's) is
# named a repeat offender: a warning, never acted on (core/history.py). K of 1 would name every failure.
REPEAT_OFFENDER_K = envint("CLUSTER_HEALTH_REPEAT_OFFENDER_K", 3, 2, 366)
REPEAT_OFFENDER_DAYS = envint("CLUSTER_HEALTH_REPEAT_OFFENDER_DAYS", 30, 2, 366)
if REPEAT_OFFENDER_K > REPEAT_OFFENDER_DAYS:
    raise ImproperlyConfigured("CLUSTER_HEALTH_REPEAT_OFFENDER_K: must not exceed CLUSTER_HEALTH_REPEAT_OFFENDER_DAYS")
# Rejected messages kept a minute, across the server; the rest are counted only (/metrics).
REJECTED_STORED_PER_MINUTE = envint("CLUSTER_HEALTH_REJECTED_STORED_PER_MINUTE", 120, 1)
PRUNE_CRON = envstr("CLUSTER_HEALTH_PRUNE_CRON", "15 3 * * *")
METRICS_TOKEN = envstr("CLUSTER_HEALTH_METRICS_TOKEN")
if PRODUCTION and (not METRICS_TOKEN or len(METRICS_TOKEN) < 16 or METRICS_TOKEN.startswith("change-me")):
    # /metrics names every node and its failures: never anonymous in production.
    raise ImproperlyConfigured(
        "CLUSTER_HEALTH_METRICS_TOKEN: required (16+ characters, not the example) when CLUSTER_HEALTH_PRODUCTION=1"
    )

# Agent identity: every heartbeat and result must be signed with the node's enrolled key
# (manage.py enroll) within this window; commands to agents are signed the same way.
SIGNATURE_WINDOW_S = envfloat("CLUSTER_HEALTH_SIGNATURE_WINDOW_S", 300.0, 5.0, 3600.0)
# Development only: accept agents that run without a key (scripts/run without enrolment).
ALLOW_UNSIGNED_AGENTS = envbool("CLUSTER_HEALTH_ALLOW_UNSIGNED_AGENTS", False)
if PRODUCTION and ALLOW_UNSIGNED_AGENTS:
    raise ImproperlyConfigured("CLUSTER_HEALTH_ALLOW_UNSIGNED_AGENTS: refused when CLUSTER_HEALTH_PRODUCTION=1")

# Actions: alerts, Slurm. Everything here is off or harmless until configured.
BASE_URL = (envstr("CLUSTER_HEALTH_BASE_URL", "http://localhost:8000") or "").rstrip("/")
# Comma-separated URLs that become alert channels after migrate: https://... a JSON webhook,
# slack+https://... a Slack-compatible webhook, mailto:ops@example.com an e-mail channel.
ALERT_WEBHOOKS = envlist("CLUSTER_HEALTH_ALERT_WEBHOOKS")
ALERT_OFFLINE_AFTER_S = envfloat("CLUSTER_HEALTH_ALERT_OFFLINE_AFTER_S", 900.0, 10.0, 7 * 86400.0)
ALERT_RATE_PER_HOUR = envint("CLUSTER_HEALTH_ALERT_RATE_PER_HOUR", 30, 1)
ALERT_TIMEOUT_S = envfloat("CLUSTER_HEALTH_ALERT_TIMEOUT_S", 10.0, 0.5, 120.0)
ALERT_MAX_RETRIES = envint("CLUSTER_HEALTH_ALERT_MAX_RETRIES", 6, 0, 20)
ALERT_RETRY_BACKOFF_S = envint("CLUSTER_HEALTH_ALERT_RETRY_BACKOFF_S", 5, 1, 3600)
SLURM_ACTIONS = envstr("CLUSTER_HEALTH_SLURM_ACTIONS", "off").strip().lower()
if SLURM_ACTIONS not in ("off", "report", "drain"):
    raise ImproperlyConfigured(f"CLUSTER_HEALTH_SLURM_ACTIONS: expected off, report or drain, got {SLURM_ACTIONS!r}")
SLURM_NODE_MAP = envstr("CLUSTER_HEALTH_SLURM_NODE_MAP", "") or ""
SLURM_SCONTROL = envstr("CLUSTER_HEALTH_SLURM_SCONTROL", "scontrol") or "scontrol"
SLURM_TIMEOUT_S = envfloat("CLUSTER_HEALTH_SLURM_TIMEOUT_S", 20.0, 1.0, 300.0)
# The Slurm user an idle-gap sweep's hold (a MAINT reservation) is made for; empty: the worker's own user.
SLURM_HOLD_USER = envstr("CLUSTER_HEALTH_SLURM_HOLD_USER", "") or ""
# The most of the fleet idle sweeps keep caught at once (a MAINT,IGNORE_JOBS reservation on a busy node with
# stale pairs, so the node is held, idle, for the next idle sweep when its job ends); 0, the default, catches none
# (docs/OPERATIONS.md: on a simulated fleet 2 % gained half a point of coverage at most).
IDLE_CATCH_SHARE = envfloat("CLUSTER_HEALTH_IDLE_CATCH_SHARE", 0.0, 0.0, 0.1)
# An idle sweep's pairs: its nodes' stalest, as many as this many rounds measure (its hold's length).
IDLE_MAX_ROUNDS = envint("CLUSTER_HEALTH_IDLE_MAX_ROUNDS", 20, 1, 1023)
# The versions every node must run, pinned by an operator ("torch=2.6.0,nccl=2.23.4"); what is not pinned is
# what a strong majority of the fleet runs, or nothing. "torch=2.6.0|2.5.1" declares a rolling upgrade: both
# pass `agents check` until CLUSTER_HEALTH_EXPECTED_UPGRADE_UNTIL (ISO 8601; unset: until this changes),
# then only the first.
EXPECTED_VERSIONS = envpins("CLUSTER_HEALTH_EXPECTED_VERSIONS", ("torch", "cuda", "nccl", "driver"))
EXPECTED_UPGRADE_UNTIL = None
if _until := (envstr("CLUSTER_HEALTH_EXPECTED_UPGRADE_UNTIL") or "").strip():
    try:
        EXPECTED_UPGRADE_UNTIL = datetime.fromisoformat(_until.replace("Z", "+00:00"))
    except ValueError:
        raise ImproperlyConfigured(
            f"CLUSTER_HEALTH_EXPECTED_UPGRADE_UNTIL: expected an ISO 8601 time, got {_until!r}"
        ) from None
    if EXPECTED_UPGRADE_UNTIL.tzinfo is None:
        EXPECTED_UPGRADE_UNTIL = EXPECTED_UPGRADE_UNTIL.replace(tzinfo=UTC)
K8S_ACTIONS = envstr("CLUSTER_HEALTH_K8S_ACTIONS", "off").strip().lower()
if K8S_ACTIONS != "off":
    raise ImproperlyConfigured("CLUSTER_HEALTH_K8S_ACTIONS: only off is supported in this release")

# E-mail alerts go through Django's mail settings.
EMAIL_HOST = envstr("EMAIL_HOST", "localhost")
EMAIL_PORT = envint("EMAIL_PORT", 25, 1, 65535)
EMAIL_HOST_USER = envstr("EMAIL_HOST_USER", "") or ""
EMAIL_HOST_PASSWORD = envstr("EMAIL_HOST_PASSWORD", "") or ""
EMAIL_USE_TLS = envbool("EMAIL_USE_TLS", False)
EMAIL_USE_SSL = envbool("EMAIL_USE_SSL", False)
EMAIL_TIMEOUT = envint("EMAIL_TIMEOUT", 10, 1, 300)
DEFAULT_FROM_EMAIL = envstr("DEFAULT_FROM_EMAIL", "cluster-health@localhost")

# Security. Production turns on everything `check --deploy` asks for; a deployment
# behind a TLS-terminating proxy sets SECURE_PROXY_SSL_HEADER through its env.
SESSION_COOKIE_SECURE = envbool("SESSION_COOKIE_SECURE", PRODUCTION)
CSRF_COOKIE_SECURE = envbool("CSRF_COOKIE_SECURE", PRODUCTION)
SECURE_SSL_REDIRECT = envbool("SECURE_SSL_REDIRECT", PRODUCTION)
SECURE_HSTS_SECONDS = envint("SECURE_HSTS_SECONDS", 31536000 if PRODUCTION else 0, 0)
SECURE_HSTS_INCLUDE_SUBDOMAINS = envbool("SECURE_HSTS_INCLUDE_SUBDOMAINS", PRODUCTION)
SECURE_HSTS_PRELOAD = envbool("SECURE_HSTS_PRELOAD", PRODUCTION)
SECURE_CONTENT_TYPE_NOSNIFF = True
X_FRAME_OPTIONS = "DENY"
SECURE_REFERRER_POLICY = "same-origin"
BEHIND_TLS_PROXY = envbool("BEHIND_TLS_PROXY", False)
if BEHIND_TLS_PROXY:
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
# Login throttling (cluster_health/web/login_throttle.py): this many failed logins within the
# window, for one user name or from one address, lock both login pages for it for the lockout.
LOGIN_FAILURE_LIMIT = envint("CLUSTER_HEALTH_LOGIN_FAILURE_LIMIT", 5, 1, 1000)
LOGIN_FAILURE_WINDOW_S = envint("CLUSTER_HEALTH_LOGIN_FAILURE_WINDOW_S", 900, 1, 86400)
LOGIN_LOCKOUT_S = envint("CLUSTER_HEALTH_LOGIN_LOCKOUT_S", 900, 1, 86400)
SILENCED_SYSTEM_CHECKS = envlist("SILENCED_SYSTEM_CHECKS")

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"}},
    "filters": {"redact": {"()": "agents.broker.RedactingFilter"}},  # no Redis or database password in a log
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain", "filters": ["redact"]}},
    "root": {"handlers": ["console"], "level": envstr("LOG_LEVEL", "INFO")},
    "loggers": {"django.channels.server": {"level": "WARNING"}, "daphne": {"level": "WARNING"}},
}
