"""WebSocket consumers for live pages: one sweep's cells, and the overview.

The control plane sends ``sweep.update`` events to the groups ``sweep.<id>`` and
``overview`` after each commit. Under load that is one event per result; a
consumer gathers them and forwards at most one frame per FLUSH_S, with each
pair's latest state, so a browser at 1,024 nodes redraws a few times a second,
not half a million times. A browser that connects or reconnects re-reads the
whole state over HTTP, so frames are an optimisation and never the record.

A socket lives no longer than the login it was opened with: it closes when its session
logs out, is deleted or expires (at the session's expiry, read from the session store), and
when its user is deactivated, deleted or changes password; a frame due after any of these is
never sent.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import logging
import math
import time
from importlib import import_module
from typing import Any

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer

log = logging.getLogger(__name__)

FLUSH_S = 0.25
RECHECK_S = 60.0  # an open socket reads its login again at least this often
CLOSE_UNAUTHENTICATED = 4401
CLOSE_LOGGED_OUT = 4403  # logged out, or the session was deleted
CLOSE_SESSION_EXPIRED = 4408
CLOSE_USER_ENDED = 4410  # the user was deactivated or deleted, or its password changed


def _group_name(prefix: str, purpose: bytes, value: str) -> str:
    """``prefix.<HMAC of value>``: channels_redis keeps a group's members under a Redis key named
    after the group, and whoever can list Redis keys must find neither logins nor who is online there."""
    from django.conf import settings

    base = hmac.new(settings.SECRET_KEY.encode(), purpose, hashlib.sha256).digest()
    return prefix + "." + hmac.new(base, value.encode(), hashlib.sha256).hexdigest()[:40]


def session_group(session_key: str) -> str:
    """The group of one login session's sockets: told when the session logs out or is deleted."""
    return _group_name("session", b"cluster-health session group v1", session_key)


def user_group(user_pk: Any) -> str:
    """The group of every socket one user has open: told when the user is saved or deleted."""
    return _group_name("user", b"cluster-health user group v1", str(user_pk))


def _tell(group: str, event_type: str) -> None:
    """Tell a group's sockets; never fails the save or logout that asked (Redis down, a command run
    before the broker is up): the sockets then see the change at their next recheck (RECHECK_S)."""
    from asgiref.sync import async_to_sync
    from channels.layers import get_channel_layer

    try:
        layer = get_channel_layer()
        if layer is not None:
            async_to_sync(layer.group_send)(group, {"type": event_type})
    except Exception as exc:  # any transport error: the sockets' recheck is the fallback
        log.warning("could not tell open pages of an ended login (%s): %s", event_type, exc)


def close_sessions_sockets(sender: Any, request: Any, user: Any, **kwargs: Any) -> None:
    """On logout (Django's user_logged_out, before the session is flushed): close that session's sockets."""
    key = getattr(getattr(request, "session", None), "session_key", None)
    if key:
        _tell(session_group(key), "session.ended")


def user_saved(sender: Any, instance: Any, **kwargs: Any) -> None:
    """A user row changed (deactivated, a new password, or only a login): after the commit, its
    sockets check their login again and close if it no longer holds."""
    from django.db import transaction

    group = user_group(instance.pk)
    transaction.on_commit(lambda: _tell(group, "login.check"))


def user_deleted(sender: Any, instance: Any, **kwargs: Any) -> None:
    """A user deleted: its sockets close."""
    from django.db import transaction

    group = user_group(instance.pk)
    transaction.on_commit(lambda: _tell(group, "user.ended"))


def session_deleted(sender: Any, instance: Any, **kwargs: Any) -> None:
    """A session row deleted (an admin, ``clearsessions``, a flush): that session's sockets close."""
    from django.db import transaction

    group = session_group(instance.session_key)
    transaction.on_commit(lambda: _tell(group, "session.ended"))


def connect_signals() -> None:
    """Wire the ends of a login to its sockets (called once from the app's ready())."""
    from django.contrib.auth import get_user_model
    from django.contrib.auth.signals import user_logged_out
    from django.contrib.sessions.models import Session
    from django.db.models.signals import post_delete, post_save

    user_model = get_user_model()
    user_logged_out.connect(close_sessions_sockets, dispatch_uid="cluster_health.close_sessions_sockets")
    post_save.connect(user_saved, sender=user_model, dispatch_uid="cluster_health.sockets.user_saved")
    post_delete.connect(user_deleted, sender=user_model, dispatch_uid="cluster_health.sockets.user_deleted")
    post_delete.connect(session_deleted, sender=Session, dispatch_uid="cluster_health.sockets.session_deleted")


def _user_active(user_pk: Any) -> float | None:
    """For a socket opened without a session (a test's scope): math.inf while the user is active, else None."""
    from django.contrib.auth import get_user_model

    return math.inf if get_user_model().objects.filter(pk=user_pk, is_active=True).exists() else None


def login_expiry(session_key: str, user_pk: Any) -> float | None:
    """When this session's login ends (a Unix time), or None when it no longer holds: the session
    is gone or expired, names another user, or its user is inactive, deleted or has changed password.

    Read fresh from the session store, so a session extended by a later request is seen extended.
    """
    from django.conf import settings
    from django.contrib.auth import BACKEND_SESSION_KEY, HASH_SESSION_KEY, SESSION_KEY, load_backend
    from django.utils.crypto import constant_time_compare

    store = import_module(settings.SESSION_ENGINE).SessionStore(session_key)
    data = store.load()  # {} for a missing or expired session
    if not data or str(data.get(SESSION_KEY)) != str(user_pk):
        return None
    if data.get(BACKEND_SESSION_KEY) not in settings.AUTHENTICATION_BACKENDS:  # as Django's get_user checks
        return None
    user = load_backend(data[BACKEND_SESSION_KEY]).get_user(user_pk)  # None for an inactive user
    if user is None:
        return None
    if hasattr(user, "get_session_auth_hash") and not constant_time_compare(
        data.get(HASH_SESSION_KEY, ""), user.get_session_auth_hash()
    ):
        return None
    model = getattr(store, "model", None)  # the database engines keep the expiry on the row
    if model is not None:
        row = model.objects.filter(session_key=session_key).values_list("expire_date", flat=True).first()
        if row is None:
            return None
        return row.timestamp()
    return store.get_expiry_date().timestamp()


class SweepUpdatesConsumer(AsyncJsonWebsocketConsumer):
    """Forwards batched sweep updates to a logged-in browser while its login holds; anonymous handshakes are refused."""

    ended = False  # once closed for an ended login, nothing more is sent
    expires_at: float | None = None  # the session's expiry (Unix time); None for a socket without a session

    async def connect(self):
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            # Closing before accept makes the server answer the handshake with 403.
            await self.close(code=CLOSE_UNAUTHENTICATED)
            return
        self.user_pk = user.pk
        session = self.scope.get("session")
        self.session_key = session.session_key if session and session.session_key else None
        if self.session_key:
            self.expires_at = await database_sync_to_async(login_expiry)(self.session_key, user.pk)
            if self.expires_at is None or self.expires_at <= time.time():
                await self.close(code=CLOSE_UNAUTHENTICATED)
                return
        sweep_id = self.scope["url_route"]["kwargs"].get("sweep_id")
        self.group = f"sweep.{sweep_id}" if sweep_id is not None else "overview"
        self.pending_pairs: dict[tuple[int, str, str], dict[str, Any]] = {}  # (sweep, a, b) -> latest pair
        self.pending_meta: dict[int, dict[str, Any]] = {}
        self.flusher: asyncio.Task[None] | None = None
        self.login_groups = [user_group(user.pk)] + ([session_group(self.session_key)] if self.session_key else [])
        for group in [self.group, *self.login_groups]:
            await self.channel_layer.group_add(group, self.channel_name)
        self.expiry_watch = asyncio.ensure_future(self._close_at_expiry()) if self.expires_at else None
        await self.accept()
        await self.send_json({"type": "hello", "group": self.group})

    async def disconnect(self, code):
        for group in [getattr(self, "group", None), *getattr(self, "login_groups", [])]:
            if group:
                await self.channel_layer.group_discard(group, self.channel_name)
        for task in (getattr(self, "flusher", None), getattr(self, "expiry_watch", None)):
            if task:  # none before connect() accepted
                task.cancel()

    async def end(self, code: int) -> None:
        """Close for an ended login: nothing pending is sent, now or later."""
        if self.ended:
            return
        self.ended = True
        self.pending_pairs, self.pending_meta = {}, {}
        await self.close(code=code)

    def past_expiry(self) -> bool:
        return self.expires_at is not None and time.time() >= self.expires_at

    async def _close_at_expiry(self):
        # At the expiry the session is read again: a request since may have extended it. It is also
        # read every RECHECK_S: a change no signal announced (a queryset update()) is seen within it.
        while not self.ended:
            await asyncio.sleep(min(RECHECK_S, max(0.0, (self.expires_at or 0) - time.time())))
            expires_at = await database_sync_to_async(login_expiry)(self.session_key, self.user_pk)
            if expires_at is None or expires_at <= time.time():  # None: expired, or the login no longer holds
                await self.end(CLOSE_SESSION_EXPIRED if self.past_expiry() else CLOSE_USER_ENDED)
                return
            self.expires_at = expires_at

    @classmethod
    async def decode_json(cls, text_data):
        try:
            return await super().decode_json(text_data)
        except ValueError:  # not JSON: ignored like any other frame this consumer does not expect
            return None

    async def receive(self, text_data=None, bytes_data=None, **kwargs):
        if text_data is None:
            return  # binary frames carry nothing for this consumer
        await super().receive(text_data=text_data, bytes_data=bytes_data, **kwargs)

    async def receive_json(self, content, **kwargs):
        if not isinstance(content, dict) or self.ended:
            return
        if self.past_expiry():
            await self.end(CLOSE_SESSION_EXPIRED)
        elif content.get("type") == "ping":
            await self.send_json({"type": "pong"})

    async def session_ended(self, event):
        """Its session logged out or was deleted: a page left open must stop receiving what the user may
        no longer see."""
        await self.end(CLOSE_LOGGED_OUT)

    async def user_ended(self, event):
        """Its user was deleted."""
        await self.end(CLOSE_USER_ENDED)

    async def login_check(self, event):
        """Its user was saved: close unless the login still holds (still active, the same password)."""
        if self.ended:
            return
        expires_at = (
            await database_sync_to_async(login_expiry)(self.session_key, self.user_pk)
            if self.session_key
            else await database_sync_to_async(_user_active)(self.user_pk)
        )
        if expires_at is None:
            await self.end(CLOSE_USER_ENDED)
        elif self.session_key:
            self.expires_at = expires_at

    async def sweep_update(self, event):
        if self.ended:
            return
        if self.past_expiry():
            await self.end(CLOSE_SESSION_EXPIRED)
            return
        sweep = event.get("sweep")
        for pair in event.get("pairs") or []:
            self.pending_pairs[(sweep, pair.get("a"), pair.get("b"))] = pair
        meta = self.pending_meta.setdefault(sweep, {})
        for field in ("progress", "status", "verdict"):
            if event.get(field) is not None:
                meta[field] = event[field]
        if self.flusher is None or self.flusher.done():
            self.flusher = asyncio.ensure_future(self._flush_later())

    async def _flush_later(self):
        # Loop until nothing is pending: events that arrive while a frame is being sent are
        # sent in the next round, not left waiting for an event that may never come.
        while self.pending_pairs or self.pending_meta:
            await asyncio.sleep(FLUSH_S)
            if self.ended or self.past_expiry():
                await self.end(CLOSE_SESSION_EXPIRED)
                return
            pairs, self.pending_pairs = self.pending_pairs, {}
            metas, self.pending_meta = self.pending_meta, {}
            for sweep in {*metas, *(s for s, _a, _b in pairs)}:
                frame = {
                    "type": "update",
                    "sweep": sweep,
                    **metas.get(sweep, {}),
                    "pairs": [p for (s, _a, _b), p in pairs.items() if s == sweep],
                }
                await self.send_json(frame)
