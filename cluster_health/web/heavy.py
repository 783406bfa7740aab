"""A bound on what one viewer's requests may cost: the pages and exports that read a whole sweep or
the whole fleet (the CSV of half a million pairs, a report decoding two matrices, the consistency
table) are answered at most HEAVY_REQUESTS_PER_MINUTE times a minute per user, then 429 with
Retry-After. Counts live in Django's cache (Redis in production), shared by every web process.
"""

from __future__ import annotations

import time
from functools import wraps

from django.conf import settings
from django.core.cache import cache
from django.http import HttpResponse

THROTTLED_STATUS = 429


def _over_budget(user_id: int) -> int:
    """Seconds until this user's budget renews, or 0 when this request is within it."""
    minute = int(time.time() // 60)
    key = f"heavy-requests:{user_id}:{minute}"
    cache.add(key, 0, timeout=120)
    try:
        used = cache.incr(key)
    except ValueError:  # expired between add and incr
        cache.set(key, 1, timeout=120)
        used = 1
    if used <= settings.HEAVY_REQUESTS_PER_MINUTE:
        return 0
    return 60 - int(time.time()) % 60 or 1


def heavy(view):
    """Count a request against its user's budget of expensive requests (after login_required)."""

    @wraps(view)
    def counted(request, *args, **kwargs):
        user_id = getattr(request.user, "pk", None) or 0
        wait = _over_budget(user_id)
        if wait:
            response = HttpResponse(
                f"Too many expensive requests (at most {settings.HEAVY_REQUESTS_PER_MINUTE} a minute): "
                f"try again in {wait} s.",
                status=THROTTLED_STATUS,
                content_type="text/plain",
            )
            response["Retry-After"] = str(wait)
            return response
        return view(request, *args, **kwargs)

    return counted
