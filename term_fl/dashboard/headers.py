"""Security headers on every answer of the dashboard: a Content-Security-Policy and X-Content-Type-Options.

The pages load their scripts and styles from the dashboard itself
(``/static``, plotly.js from the plotly package at ``/vendor``), read their
data from ``<script type="application/json">`` blocks (data, never run) and
from the JSON API, and run no inline script or event handler. The policy
allows exactly that: a script injected into a page (a run name that slipped
through escaping, say) does not run, and the page cannot be framed by another
site. Inline styles stay allowed: plotly.js styles the charts it draws with
them. ``nosniff`` keeps a browser from reading a CSV or JSON answer as a script.
"""

from __future__ import annotations

from starlette.datastructures import MutableHeaders
from starlette.types import ASGIApp, Message, Receive, Scope, Send

__all__ = ["CONTENT_SECURITY_POLICY", "SECURITY_HEADERS", "SecurityHeaders"]

CONTENT_SECURITY_POLICY = "; ".join((
    "default-src 'none'",
    "script-src 'self'",
    "style-src 'self' 'unsafe-inline'",
    "img-src 'self' data: blob:",
    "connect-src 'self'",
    "font-src 'self' data:",
    "base-uri 'none'",
    "form-action 'self'",
    "frame-ancestors 'none'",
))  # fmt: skip

SECURITY_HEADERS = {
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
}


class SecurityHeaders:
    """ASGI middleware: :data:`SECURITY_HEADERS` on every HTTP response (pages, API, static files, errors)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                for name, value in SECURITY_HEADERS.items():
                    headers[name] = value
            await send(message)

        await self.app(scope, receive, with_headers)
