"""/healthz: is the database reachable, is the broker reachable. For load balancers and compose."""

from __future__ import annotations

import time

from django.conf import settings
from django.db import connection
from django.http import JsonResponse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET

from agents import broker


def _check_database() -> dict:
    started = time.monotonic()
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
            cursor.fetchone()
    except Exception as exc:  # any driver error means "not reachable" to a load balancer
        return {"ok": False, "error": f"{type(exc).__name__}: {exc}"[:300]}
    return {"ok": True, "ms": round((time.monotonic() - started) * 1000, 2)}


def _check_broker() -> dict:
    started = time.monotonic()
    client = broker.redis_client(settings.REDIS_URL, socket_connect_timeout=2, socket_timeout=2)
    try:
        client.ping()
    except Exception as exc:
        return {"ok": False, "error": f"{type(exc).__name__}: {exc}"[:300]}
    finally:
        client.close()
    return {"ok": True, "ms": round((time.monotonic() - started) * 1000, 2)}


@never_cache
@require_GET
def healthz(request):
    """ok/error per check for anyone (load balancers); the driver's error text only for signed-in users."""
    checks = {"database": _check_database(), "broker": _check_broker()}
    ok = all(c["ok"] for c in checks.values())
    if not request.user.is_authenticated:  # error texts name hosts, ports and driver versions
        checks = {name: {"ok": c["ok"]} for name, c in checks.items()}
    return JsonResponse({"status": "ok" if ok else "error", "checks": checks}, status=200 if ok else 503)
