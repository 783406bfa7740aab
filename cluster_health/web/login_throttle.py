"""Login throttling for /accounts/login/ and /admin/login/.

After ``LOGIN_FAILURE_LIMIT`` failed logins within ``LOGIN_FAILURE_WINDOW_S``,
for one user name or from one client address, every further login for that
name or from that address is refused for ``LOGIN_LOCKOUT_S``, also with the
right password. A successful login clears the user name's count (not the
address's: an attacker's own account must not reset the address it guesses from).
Counts live in Django's cache (Redis in production), so every web process shares them.
"""

from __future__ import annotations

import hashlib
import math
import time
from functools import wraps

from django import forms
from django.conf import settings
from django.contrib.admin.forms import AdminAuthenticationForm
from django.contrib.auth.forms import AuthenticationForm
from django.core.cache import cache

THROTTLED_STATUS = 429


def client_address(request) -> str:
    """The client's address: the proxy's last X-Forwarded-For hop behind a TLS proxy, else REMOTE_ADDR.

    Only the hop the trusted proxy appended counts; earlier ones are whatever the client sent.
    """
    if settings.BEHIND_TLS_PROXY:
        forwarded = [hop.strip() for hop in request.META.get("HTTP_X_FORWARDED_FOR", "").split(",") if hop.strip()]
        if forwarded:
            return forwarded[-1]
    return request.META.get("REMOTE_ADDR", "") or "unknown"


def _subjects(request, username: str) -> list[str]:
    digest = hashlib.sha256(username.strip().lower().encode()).hexdigest()
    return [f"login-throttle:user:{digest}", f"login-throttle:addr:{client_address(request)}"]


def locked_for(request, username: str) -> int:
    """Seconds left of a lockout for this user name or this address; 0 when neither is locked."""
    now = time.time()
    until = [cache.get(subject + ":locked") or 0 for subject in _subjects(request, username)]
    return max(0, math.ceil(max(until) - now))


def record_failure(request, username: str) -> None:
    for subject in _subjects(request, username):
        key = subject + ":failures"
        cache.add(key, 0, timeout=settings.LOGIN_FAILURE_WINDOW_S)
        try:
            failures = cache.incr(key)
        except ValueError:  # expired between add and incr
            cache.set(key, 1, timeout=settings.LOGIN_FAILURE_WINDOW_S)
            failures = 1
        if failures >= settings.LOGIN_FAILURE_LIMIT:
            cache.set(subject + ":locked", time.time() + settings.LOGIN_LOCKOUT_S, timeout=settings.LOGIN_LOCKOUT_S)
            cache.delete(key)


def record_success(request, username: str) -> None:
    user_subject = _subjects(request, username)[0]
    cache.delete(user_subject + ":failures")


class ThrottledLoginMixin:
    """Refuses a locked-out login before the password is checked; counts failures and clears on success."""

    request: object
    throttled = ""

    def clean(self):
        username = self.data.get("username", "") or ""  # type: ignore[attr-defined]
        seconds = locked_for(self.request, username)
        if seconds:
            minutes = max(1, math.ceil(seconds / 60))
            self.throttled = (
                f"Too many failed logins for this user name or from this address. Try again in {minutes} minute"
                f"{'s' if minutes != 1 else ''}."
            )
            self.request.login_throttled = seconds  # type: ignore[attr-defined]
            raise forms.ValidationError(self.throttled, code="throttled")
        try:
            cleaned = super().clean()  # type: ignore[misc]
        except forms.ValidationError:
            if self.user_cache is None:  # type: ignore[attr-defined]  # a wrong password, not a staff-only refusal
                record_failure(self.request, username)
            raise
        record_success(self.request, username)
        return cleaned


class ThrottledAuthenticationForm(ThrottledLoginMixin, AuthenticationForm):
    pass


class ThrottledAdminAuthenticationForm(ThrottledLoginMixin, AdminAuthenticationForm):
    pass


def throttled_status(view):
    """Answer a refused (locked-out) login with 429 instead of the form's usual 200."""

    @wraps(view)
    def inner(request, *args, **kwargs):
        response = view(request, *args, **kwargs)
        seconds = getattr(request, "login_throttled", 0)
        if seconds:
            response.status_code = THROTTLED_STATUS
            response["Retry-After"] = str(seconds)
        return response

    return inner
