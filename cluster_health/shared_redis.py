"""This process's Redis client for short commands (nonces, probe commands): one per URL, kept.

redis-py's connection pool notices a fork and opens new connections in the child, so a
client made before a Celery pool forks is safe to use after.
"""

from __future__ import annotations

import redis
from django.conf import settings

from agents import broker

_clients: dict[str, redis.Redis] = {}


def client() -> redis.Redis:
    """The client for ``settings.REDIS_URL`` (tests point it elsewhere: a client per URL)."""
    url = settings.REDIS_URL
    if url not in _clients:
        _clients[url] = broker.redis_client(url, socket_connect_timeout=5, socket_timeout=5)
    return _clients[url]
