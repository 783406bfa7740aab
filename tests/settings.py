"""Test settings: the production module, with a file-backed SQLite test database.

Subprocesses the tests start (Celery workers, the ASGI server) must see the same
database, which an in-memory SQLite database cannot offer.
"""

import os

from cluster_health.settings import *  # noqa: F403
from cluster_health.settings import DATABASES, VAR_DIR

if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    VAR_DIR.mkdir(parents=True, exist_ok=True)
    DATABASES["default"]["TEST"] = {"NAME": str(VAR_DIR / f"test-{os.getpid()}.sqlite3")}
else:
    DATABASES["default"]["TEST"] = {"NAME": f"test_cluster_health_{os.getpid()}"}

PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]  # fast logins in tests

# Login-failure counts in this process's memory: a test's failed logins never reach another test run's Redis.
CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}

# The suite rejects hundreds of messages a minute on purpose; each test that counts rows expects
# its own kept. The per-minute budget has a test of its own, which lowers it.
REJECTED_STORED_PER_MINUTE = 1_000_000

# Pages read what the test just wrote; the bounds on heavy requests and on changes have tests of their own.
CONSISTENCY_CACHE_S = 0.0
HEAVY_REQUESTS_PER_MINUTE = 100_000
ACTION_REQUESTS_PER_MINUTE = 100_000
