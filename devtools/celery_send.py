"""Task messages sent through Celery's own ``app.send_task``, as the server sent them before
``cluster_health.queues.dispatch`` wrote them itself: the reference its text is compared with
(tests/queues/test_dispatch_wire.py) and timed against (benchmarks/publish.py).

Import it after Django's settings are in place (it imports the server's Celery app).
"""

from __future__ import annotations

from contextlib import nullcontext

from cluster_health.celery import app
from cluster_health.queues import dispatch


def celery_send(messages: list[dispatch.Message], batch: int | None = None) -> None:
    """Send (task, queue, kwargs, expires_s) messages with ``send_task``, one producer for all.

    ``batch``: buffer them in the producer's batches of at most this many (one Redis pipeline each).
    """
    with app.producer_or_acquire() as producer, producer.batch(max_size=batch) if batch else nullcontext():
        for task, queue, kwargs, expires_s in messages:
            app.send_task(
                task,
                kwargs=kwargs,
                queue=queue,
                expires=expires_s,
                producer=producer,
                declare=[],
                argsrepr="()",
                kwargsrepr=dispatch._repr(kwargs),
            )
