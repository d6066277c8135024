"""The dashboard's access token: asked for once it can be reached from other hosts.

A dashboard bound to a loopback address answers anyone on this machine, as
before. Bound to any other address (``--host 0.0.0.0``, a container), it
answers only requests that carry its token, which ``term-fl dashboard``
generates at start and prints in the address to open, or takes from
``$TERM_FL_DASHBOARD_TOKEN`` (then it is asked for on loopback too). The
token travels in one of three ways:

- ``?token=TOKEN`` in any page's address, once: the answer is a redirect to
  the same address without it, setting an HttpOnly cookie (``SameSite=Lax``,
  the whole site), so the pages and the API calls they make work as before;
- that cookie;
- ``Authorization: Bearer TOKEN``, for scripts (``curl -H``).

Anything else gets 401: a page asking for the token (a form that sends it
as ``?token=``), or JSON under ``/api/``. Tokens are compared in constant
time. This guard sits behind the ``Host:`` check (:mod:`term_fl.dashboard.hosts`).
"""

from __future__ import annotations

import hmac
import re
import secrets
from html import escape
from http.cookies import SimpleCookie
from urllib.parse import parse_qsl, urlencode

from starlette.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from starlette.types import ASGIApp, Receive, Scope, Send

from term_fl.dashboard.hosts import is_loopback

TOKEN_ENV = "TERM_FL_DASHBOARD_TOKEN"
COOKIE = "term_fl_dashboard_token"
PARAM = "token"
TOKEN_PATTERN = re.compile(r"[A-Za-z0-9._~+/=-]{16,}")  # safe in a URL, a cookie and a header


def new_token() -> str:
    """A fresh random token (32 URL-safe characters, 192 bits)."""
    return secrets.token_urlsafe(24)


def check_token(token: str) -> str:
    """``token`` if it can be one (16 or more of ``A-Z a-z 0-9 . _ ~ + / = -``); else ValueError naming the rule."""
    if not TOKEN_PATTERN.fullmatch(token):
        raise ValueError(f"{TOKEN_ENV}: a dashboard token is 16 or more of the characters A-Z a-z 0-9 . _ ~ + / = - "
                         f"(got {len(token)} characters); leave it unset and the dashboard makes one")
    return token


def token_for(bind_host: str, given: str | None) -> str | None:
    """The token a dashboard bound to ``bind_host`` asks for: ``given``, else a new one unless it is loopback-only."""
    if given:
        return check_token(given)
    return None if is_loopback(bind_host) else new_token()


def _same(a: str, b: str) -> bool:
    return hmac.compare_digest(a.encode(), b.encode())


def _raw_path(scope: Scope) -> str:
    """The request's path as the client sent it (percent-escapes kept: run ids may hold '/')."""
    return (scope.get("raw_path") or scope["path"].encode()).decode("latin-1")


PROMPT = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<link rel="icon" href="data:,"><title>Token needed · term-fl</title>
<style>body{{font:16px system-ui,sans-serif;margin:3em auto;max-width:34em;padding:0 1em}}
input{{font:inherit;padding:.3em}}p.wrong{{color:#b00020}}</style></head>
<body><h1>term-fl fairness dashboard</h1>
<p>This dashboard can be reached from other machines, so it asks for its access token: the one
<code>term-fl dashboard</code> printed at start (<code>?token=...</code> in the address it printed), or
<code>${env}</code> where it was given.</p>
{wrong}<form method="get" action="{action}">{hidden}
<label>Token <input type="password" name="{param}" id="token" autocomplete="current-password" autofocus></label>
<button type="submit">Open</button></form></body></html>
"""


class TokenGuard:
    """ASGI middleware: pass requests that carry ``token`` (parameter, cookie or bearer header); answer 401 otherwise."""

    def __init__(self, app: ASGIApp, token: str) -> None:
        self.app = app
        self.token = check_token(token)

    def _carried(self, scope: Scope) -> tuple[bool, str | None]:
        """Whether the header or cookie carries the token, and the ``?token=`` value if any."""
        headers = {k: v.decode("latin-1") for k, v in scope.get("headers", [])}
        scheme, _, value = headers.get(b"authorization", "").partition(" ")
        if scheme.lower() == "bearer" and _same(value.strip(), self.token):
            return True, None
        cookie = SimpleCookie()
        try:
            cookie.load(headers.get(b"cookie", ""))
        except Exception:  # noqa: BLE001 (a malformed Cookie header counts as none)
            cookie = SimpleCookie()
        if COOKIE in cookie and _same(cookie[COOKIE].value, self.token):
            return True, None
        query = dict(parse_qsl(scope.get("query_string", b"").decode("latin-1"), keep_blank_values=True))
        return False, query.get(PARAM)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        ok, given = self._carried(scope)
        if ok:
            await self.app(scope, receive, send)
            return
        if given is not None and _same(given, self.token):
            response: Response = self._set_cookie(scope)
        else:
            response = self._refuse(scope, wrong=given is not None)
        await response(scope, receive, send)

    def _set_cookie(self, scope: Scope) -> Response:
        """Redirect to the same address without ``?token=``, with the cookie that replaces it."""
        rest = [(k, v) for k, v in parse_qsl(scope.get("query_string", b"").decode("latin-1"), keep_blank_values=True)
                if k != PARAM]
        response = RedirectResponse(_raw_path(scope) + (f"?{urlencode(rest)}" if rest else ""), status_code=303)
        response.set_cookie(COOKIE, self.token, httponly=True, samesite="lax", path="/")
        return response

    def _refuse(self, scope: Scope, *, wrong: bool) -> Response:
        """401: JSON for the API, a page that asks for the token elsewhere."""
        headers = {"WWW-Authenticate": 'Bearer realm="term-fl dashboard"', "Cache-Control": "no-store"}
        message = "wrong access token" if wrong else "this dashboard needs its access token"
        path = scope["path"]
        if path.startswith("/api/") or path == "/openapi.json":
            detail = f"{message}: send 'Authorization: Bearer TOKEN' (the token term-fl dashboard printed, or ${TOKEN_ENV})"
            return JSONResponse({"detail": detail}, status_code=401, headers=headers)
        query = [(k, v) for k, v in parse_qsl(scope.get("query_string", b"").decode("latin-1"), keep_blank_values=True)
                 if k != PARAM]
        hidden = "".join(f'<input type="hidden" name="{escape(k)}" value="{escape(v)}">' for k, v in query)
        page = PROMPT.format(env=TOKEN_ENV, wrong='<p class="wrong">Wrong token.</p>' if wrong else "",
                             action=escape(_raw_path(scope)), hidden=hidden, param=PARAM)
        return HTMLResponse(page, status_code=401, headers=headers)
