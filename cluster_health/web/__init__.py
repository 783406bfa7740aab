"""The web side: pages, the JSON API, WebSocket consumers, serializers, broadcasts, /metrics and /healthz."""
