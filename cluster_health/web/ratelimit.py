"""One rate limiter for the web server: a budget of requests a minute per user (per client address for
anyone not logged in), kept in Django's cache (Redis in production) so every web process shares it.

Two budgets use it. Every request that changes something (any method but GET, HEAD, OPTIONS, TRACE:
starting and cancelling sweeps, maintenance, returns to service, acknowledgements, re-runs, schedules,
the admin, the API's POST and DELETE) counts against ``ACTION_REQUESTS_PER_MINUTE``, through
``ActionRateLimitMiddleware``, so no view can be left out. The pages and exports that read a whole
sweep or the whole fleet count against ``HEAVY_REQUESTS_PER_MINUTE`` (``web/heavy.py``). Past its
budget a request is answered 429 with ``Retry-After`` (seconds until the minute renews) and a sentence
saying so, JSON under /api/. Failed logins have a stricter lockout of their own (``login_throttle.py``).
"""

from __future__ import annotations

import time

from django.conf import settings
from django.core.cache import cache
from django.http import HttpResponse, JsonResponse

from cluster_health.web.login_throttle import THROTTLED_STATUS, client_address

SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS", "TRACE"})


def subject_of(request) -> str:
    """Who a request counts against: its logged-in user, the user of its API token, else its address.

    A token is looked up by its hash only (``api_view`` still checks it in full): any number of
    tokens of one user share that user's budget, and a made-up token counts against the address.
    """
    user = getattr(request, "user", None)
    if user is not None and user.is_authenticated:
        return f"user:{user.pk}"
    scheme, _, raw = request.headers.get("Authorization", "").partition(" ")
    if scheme == "Bearer" and raw.strip():
        from cluster_health.models import ApiToken

        owner = ApiToken.objects.filter(token_hash=ApiToken.hash(raw.strip())).values_list("user_id", flat=True)
        if (user_id := owner.first()) is not None:
            return f"user:{user_id}"
    return f"addr:{client_address(request)}"


def over_budget(budget: str, subject: str, per_minute: int) -> int:
    """Count one request; seconds until this subject's budget renews, or 0 when the request is within it."""
    minute = int(time.time() // 60)
    key = f"rate:{budget}:{subject}:{minute}"
    cache.add(key, 0, timeout=120)
    try:
        used = cache.incr(key)
    except ValueError:  # expired between add and incr
        cache.set(key, 1, timeout=120)
        used = 1
    if used <= per_minute:
        return 0
    return 60 - int(time.time()) % 60 or 1


def refused(request, what: str, per_minute: int, wait: int) -> HttpResponse:
    """429 naming the budget and when to come back: JSON for the API, plain text for pages."""
    message = f"Too many {what} (at most {per_minute} a minute): try again in {wait} s."
    response: HttpResponse
    if request.path.startswith("/api/"):
        response = JsonResponse({"error": message}, status=THROTTLED_STATUS)
    else:
        response = HttpResponse(message, status=THROTTLED_STATUS, content_type="text/plain")
    response["Retry-After"] = str(wait)
    return response


def limited(request, budget: str, what: str, per_minute: int) -> HttpResponse | None:
    """The 429 answer when ``request`` is past its subject's budget, else None (and the request counted)."""
    wait = over_budget(budget, subject_of(request), per_minute)
    return refused(request, what, per_minute, wait) if wait else None


class ActionRateLimitMiddleware:
    """Every request that may change something counts against its user's (or address's) budget of
    ``ACTION_REQUESTS_PER_MINUTE``; past it, 429 before any view runs. After AuthenticationMiddleware."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        if request.method not in SAFE_METHODS:
            per_minute = settings.ACTION_REQUESTS_PER_MINUTE
            if answer := limited(request, "actions", "changes", per_minute):
                return answer
        return self.get_response(request)
