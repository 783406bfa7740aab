"""Whether this agent still takes its commands, judged from its queue beside the Celery worker.

Celery's Redis consumer can lose its broker connection without noticing. The case met here
(docs/TESTBED.md, run 33): the broker goes away while a probe runs, the probe's result goes out
once it is back or just before it left, and the ack that follows fails ("Couldn't ack ...,
reason: ConnectionError"). The worker then neither reconnects nor takes another message, and
logs nothing more, while the heartbeat thread, on a connection of its own, goes on telling the
server that the node is up; every probe sent to it waits out its deadline. Upstream reports of
the kind: celery/celery#8030, #9054, #10205.

The queue shows what the worker does not: commands are pushed at one end of the node's list and
the worker pops the other, so a message that stays the oldest in the list for ``deaf_after_s``
while no command runs was not taken. The agent then starts itself again in place (the same
process id, so a service manager or a test bed sees it running throughout), and the fresh
worker connects and takes the waiting commands. A broker that cannot be reached is not
deafness: the worker's own reconnection is at work then, and the watch starts over.
"""

from __future__ import annotations

import logging
import os
import sys
import time
from collections.abc import Callable
from typing import NoReturn

log = logging.getLogger("agents.liveness")

DEAF_AFTER_S = 15.0  # far above a healthy idle worker's pop (milliseconds), far below a probe's deadline
DEAF_AFTER_ENV = "CLUSTER_HEALTH_AGENT_DEAF_AFTER_S"


def deaf_after_s(environ: dict[str, str] | None = None) -> float:
    raw = (os.environ if environ is None else environ).get(DEAF_AFTER_ENV) or ""
    try:
        value = float(raw) if raw else DEAF_AFTER_S
    except ValueError:
        raise ValueError(f"{DEAF_AFTER_ENV}={raw!r}: a number of seconds") from None
    if not 1.0 <= value <= 3600.0:
        raise ValueError(f"{DEAF_AFTER_ENV}={raw!r}: between 1 and 3600 seconds")
    return value


class QueueWatch:
    """Looks at the oldest message of the agent's queue, once per look; says when it was left there.

    ``oldest``: the message at the popping end of the queue (None: the queue is empty); it may
    raise OSError or a Redis error when the broker cannot be reached.
    """

    def __init__(
        self,
        oldest: Callable[[], bytes | None],
        deaf_after_s: float = DEAF_AFTER_S,
        clock: Callable[[], float] = time.monotonic,
        unreachable: tuple[type[BaseException], ...] = (OSError,),
    ):
        self.oldest = oldest
        self.deaf_after_s = deaf_after_s
        self.clock = clock
        self.unreachable = unreachable
        self.head: bytes | None = None
        self.since = 0.0

    def waited_s(self, running: bool) -> float:
        """How long the message now oldest in the queue has been the oldest while no command ran (0: none waits)."""
        now = self.clock()
        head = None
        if not running:  # a running command holds the worker: the queue waits for it, rightly
            try:
                head = self.oldest()
            except self.unreachable as e:
                log.debug("queue not read: %s", e)
        if head is None or head != self.head:
            self.head, self.since = head, now
            return 0.0
        return now - self.since

    def deaf(self, running: bool) -> bool:
        return self.waited_s(running) >= self.deaf_after_s


def restart_in_place(before: Callable[[], None] = lambda: None) -> NoReturn:
    """This process replaced by a fresh start of the same command line (same pid, environment and files)."""
    before()
    for handler in logging.getLogger().handlers:
        handler.flush()
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        os.execv(sys.executable, [sys.executable, *sys.orig_argv[1:]])
    except OSError as e:  # the interpreter is gone (a venv replaced under it): leave it to the service manager
        log.critical("could not start again in place (%s): exiting", e)
        logging.shutdown()
        os._exit(70)  # EX_SOFTWARE; systemd's Restart=always starts the agent again
