"""Synthetic nodes kept online and the probe commands a sweep sent, for tests that play results in-process."""

from __future__ import annotations

import threading

from django.db import connection
from django.utils import timezone

from cluster_health.models import Node
from devtools.captured import by_probe, take_probe_commands
from devtools.sweep_driver import heartbeat


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
