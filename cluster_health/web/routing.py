"""WebSocket routes (mounted by asgi.py inside AllowedHostsOriginValidator and AuthMiddlewareStack)."""

from django.urls import path

from cluster_health.web import consumers

websocket_urlpatterns = [
    path("ws/overview/", consumers.SweepUpdatesConsumer.as_asgi(), name="ws-overview"),
    path("ws/sweeps/<int:sweep_id>/", consumers.SweepUpdatesConsumer.as_asgi(), name="ws-sweep"),
]
