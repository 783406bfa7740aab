"""Synthetic nodes kept online, the probe commands a sweep sent, and a browser page open on a running sweep,
for tests that play results in-process."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from types import SimpleNamespace

from django.db import connection, connections
from django.utils import timezone

from cluster_health import sweeps
from cluster_health.models import Node
from cluster_health.queues import dispatch
from devtools.captured import by_probe, take_probe_commands
from devtools.sweep_driver import heartbeat
from tests.support import timing
from tests.support.browser import log_in
from tests.support.dashboard_rows import PASSWORD, make_user


class Heartbeats:
    """Keeps synthetic nodes online (the stack judges a node offline after 6 s of silence)."""

    def __init__(self, names):
        self.names = list(names)
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._loop, name="heartbeats", daemon=True)

    def _loop(self):
        try:
            while not self.stopped.wait(1.0):
                Node.objects.filter(name__in=self.names).update(last_heartbeat=timezone.now())
        finally:
            connection.close()

    def __enter__(self):
        for name in self.names:
            heartbeat(name)
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stopped.set()
        self.thread.join(5)


def probe_commands(sent) -> dict[int, list[dict]]:
    """The probe commands sent so far, by probe id (both ranks), and forget them."""
    return by_probe(take_probe_commands(sent))


class ServerSide:
    """Calls made from a thread of its own: Playwright's event loop owns the test's thread, and the
    server-side calls (ingest broadcasts over the Redis channel layer) must run outside it."""

    def __init__(self):
        self.pool = ThreadPoolExecutor(1, thread_name_prefix="server-side")

    def __call__(self, fn, *args, **kwargs):
        return self.pool.submit(fn, *args, **kwargs).result(timeout=timing.SERVER_CALL_S)

    def close(self):
        # The thread's own database connection: left open, it outlives the test (and holds
        # the PostgreSQL test database at the session's end).
        self(connections.close_all)  # in that thread: its own connections
        self.pool.shutdown()


@contextmanager
def running_sweep_page(stack, chromium, names, height: int):
    """A connectivity sweep over ``names`` (kept online), started, and a viewer's page open on it, its WebSocket open.

    Yields ``page``, ``sweep``, ``commands`` (the probe commands its start sent, by probe id) and
    ``on_server`` (a ServerSide). On the way out the page closes and the sweep is cancelled.
    """
    make_user("viewer", operator=False)
    on_server = ServerSide()
    context = chromium.new_context(viewport={"width": 1400, "height": height})
    page = context.new_page()
    sweep = None
    with Heartbeats(names), dispatch.capture() as sent:
        try:
            sweep = on_server(sweeps.request_sweep, source="command", kind="connectivity", nodes=names, deadline_s=300)
            on_server(sweeps.start_sweep, sweep.pk)
            commands = probe_commands(sent)
            base = stack.start_web()
            log_in(page, base, "viewer", PASSWORD)
            page.goto(f"{base}/sweeps/{sweep.pk}/")
            page.wait_for_function(f"() => document.body.dataset.loaded === '{sweep.pk}' && CH.wsState === 'open'")
            yield SimpleNamespace(page=page, sweep=sweep, commands=commands, on_server=on_server)
        finally:
            context.close()
            if sweep is not None:
                on_server(sweeps.cancel, sweep.pk)
            on_server.close()
