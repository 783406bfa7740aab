"""Content-Security-Policy: scripts only from this server, or inline with this response's nonce.

Every request gets ``request.csp_nonce`` (fresh, 128 bits); a template's inline
script carries ``nonce="{{ request.csp_nonce }}"`` and any other inline script,
event handler attribute or ``javascript:`` URL is refused by the browser, so an
injected ``<script>`` in a node name or hint cannot run. Styles stay
'unsafe-inline': plotly.js and the heatmap legend set ``style`` attributes, and a
style cannot run code. plotly.js needs no 'unsafe-eval'.
"""

from __future__ import annotations

import secrets

from django.utils.deprecation import MiddlewareMixin

HEADER = "Content-Security-Policy"


def policy(nonce: str, websocket_origin: str) -> str:
    """The policy for a response whose inline scripts carry ``nonce``; WebSockets only to ``websocket_origin``."""
    return "; ".join(
        (
            "default-src 'self'",
            f"script-src 'self' 'nonce-{nonce}'",
            "style-src 'self' 'unsafe-inline'",
            "img-src 'self' data: blob:",
            "font-src 'self' data:",
            f"connect-src 'self' {websocket_origin}",
            "object-src 'none'",
            "base-uri 'none'",
            "form-action 'self'",
            "frame-ancestors 'none'",
        )
    )


class ContentSecurityPolicyMiddleware(MiddlewareMixin):
    """Sets ``request.csp_nonce`` and the Content-Security-Policy header (unless a view set its own)."""

    def process_request(self, request):
        request.csp_nonce = secrets.token_urlsafe(16)

    def process_response(self, request, response):
        nonce = getattr(request, "csp_nonce", None)
        if nonce is not None and HEADER not in response:
            scheme = "wss" if request.is_secure() else "ws"
            response[HEADER] = policy(nonce, f"{scheme}://{request.get_host()}")
        return response
