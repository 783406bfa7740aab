"""A bound on what one viewer's requests may cost: the pages and exports that read a whole sweep or
the whole fleet (the CSV of half a million pairs, a report decoding two matrices, the consistency
table) are answered at most HEAVY_REQUESTS_PER_MINUTE times a minute per user, then 429 with
Retry-After. The budget is kept by the web server's one limiter (``web/ratelimit.py``).
"""

from __future__ import annotations

from functools import wraps

from django.conf import settings

from cluster_health.web import ratelimit


def heavy(view):
    """Count a request against its user's budget of expensive requests (after login_required or api_view)."""

    @wraps(view)
    def counted(request, *args, **kwargs):
        per_minute = settings.HEAVY_REQUESTS_PER_MINUTE
        if answer := ratelimit.limited(request, "heavy", "expensive requests", per_minute):
            return answer
        return view(request, *args, **kwargs)

    return counted
