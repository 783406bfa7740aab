"""WebSocket consumers for live pages: one sweep's cells, and the overview.

The control plane sends ``sweep.update`` events to the groups ``sweep.<id>`` and
``overview`` after each commit. Under load that is one event per result; a
consumer gathers them and forwards at most one frame per FLUSH_S, with each
pair's latest state, so a browser at 1,024 nodes redraws a few times a second,
not half a million times. A browser that connects or reconnects re-reads the
whole state over HTTP, so frames are an optimisation and never the record.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
from typing import Any

from channels.generic.websocket import AsyncJsonWebsocketConsumer

FLUSH_S = 0.25
CLOSE_UNAUTHENTICATED = 4401
CLOSE_LOGGED_OUT = 4403


def session_group(session_key: str) -> str:
    """The group of one login session's sockets: told when the session logs out.

    Named by an HMAC of the session key, never the key itself: channels_redis keeps a group's
    members under a Redis key named after the group, and whoever can list Redis keys must not
    find logins there.
    """
    from django.conf import settings

    base = hmac.new(settings.SECRET_KEY.encode(), b"cluster-health session group v1", hashlib.sha256).digest()
    return "session." + hmac.new(base, session_key.encode(), hashlib.sha256).hexdigest()[:40]


def close_sessions_sockets(sender: Any, request: Any, user: Any, **kwargs: Any) -> None:
    """On logout (Django's user_logged_out, before the session is flushed): close that session's sockets."""
    from asgiref.sync import async_to_sync
    from channels.layers import get_channel_layer

    key = getattr(getattr(request, "session", None), "session_key", None)
    layer = get_channel_layer()
    if key and layer is not None:
        async_to_sync(layer.group_send)(session_group(key), {"type": "session.ended"})


class SweepUpdatesConsumer(AsyncJsonWebsocketConsumer):
    """Forwards batched sweep updates to a logged-in browser; anonymous handshakes are refused."""

    async def connect(self):
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            # Closing before accept makes the server answer the handshake with 403.
            await self.close(code=CLOSE_UNAUTHENTICATED)
            return
        sweep_id = self.scope["url_route"]["kwargs"].get("sweep_id")
        self.group = f"sweep.{sweep_id}" if sweep_id is not None else "overview"
        self.pending_pairs: dict[tuple[int, str, str], dict[str, Any]] = {}  # (sweep, a, b) -> latest pair
        self.pending_meta: dict[int, dict[str, Any]] = {}
        self.flusher: asyncio.Task[None] | None = None
        await self.channel_layer.group_add(self.group, self.channel_name)
        session = self.scope.get("session")
        self.session_group = session_group(session.session_key) if session and session.session_key else None
        if self.session_group:
            await self.channel_layer.group_add(self.session_group, self.channel_name)
        await self.accept()
        await self.send_json({"type": "hello", "group": self.group})

    async def disconnect(self, code):
        if getattr(self, "group", None):
            await self.channel_layer.group_discard(self.group, self.channel_name)
        if getattr(self, "session_group", None):
            await self.channel_layer.group_discard(self.session_group, self.channel_name)
        flusher = getattr(self, "flusher", None)  # none before connect() accepted
        if flusher:
            flusher.cancel()

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
        if not isinstance(content, dict):
            return
        if content.get("type") == "ping":
            await self.send_json({"type": "pong"})

    async def session_ended(self, event):
        """Its session logged out: a page left open must stop receiving what the user may no longer see."""
        await self.close(code=CLOSE_LOGGED_OUT)

    async def sweep_update(self, event):
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
