"""Which ``Host:`` names the dashboard answers: a guard against DNS rebinding.

Bound to loopback the dashboard asks for no token (elsewhere it does:
:mod:`term_fl.dashboard.access`). A web page on another site can make a
browser send requests to ``http://127.0.0.1:8050`` through a name the
attacker controls (DNS rebinding); the request then carries the attacker's
name in its ``Host:`` header. Answering only the names the dashboard was
bound to (plus loopback names, this machine's host name, and those given
with ``--allowed-host``) refuses such requests. An IP address in ``Host:``
cannot be rebound, so when bound to every interface (``0.0.0.0`` / ``::``)
any IP literal is accepted too.
"""

from __future__ import annotations

import ipaddress
import re
import socket
from collections.abc import Iterable

from starlette.responses import PlainTextResponse
from starlette.types import ASGIApp, Receive, Scope, Send

LOOPBACK_NAMES = ("localhost", "127.0.0.1", "::1")
WILDCARD_HOSTS = ("0.0.0.0", "::", "")


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def allowed_host_names(bind_host: str, extra: Iterable[str] = ()) -> tuple[frozenset[str], bool]:
    """The names to accept for a dashboard bound to ``bind_host``, and whether any IP literal is accepted."""
    given = (name.strip().lower() for h in extra for name in h.split(","))  # "a,b" as well as repeated flags
    names = {bind_host.lower(), *LOOPBACK_NAMES, *(name for name in given if name)}
    wildcard = bind_host in WILDCARD_HOSTS
    if wildcard or not is_loopback(bind_host):
        names.add(socket.gethostname().lower())
    names.discard("")
    return frozenset(names), wildcard


_HOST_HEADER = re.compile(r"(?:\[(?P<ipv6>[0-9a-f:.]+)\]|(?P<name>[a-z0-9._-]+))(?::[0-9]{1,5})?")
"""One host and an optional port: ``name[:port]`` or ``[IPv6][:port]`` (RFC 9110's Host: no user
information, no list, no other character)."""


def host_of(header: str) -> str | None:
    """The name in a ``Host:`` header, without its port (``[::1]:8050`` -> ``::1``); None for anything that is not
    exactly one host and an optional port (``127.0.0.1:8050@evil.example``, ``localhost:8050, evil.example``)."""
    match = _HOST_HEADER.fullmatch(header.strip().lower())
    if match is None:
        return None
    if match["ipv6"] is not None:
        return match["ipv6"] if _is_ip(match["ipv6"]) else None
    return match["name"].rstrip(".")


def _is_ip(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


class HostGuard:
    """ASGI middleware: answer 400, naming the refused host and how to allow it, for any other ``Host:``."""

    def __init__(self, app: ASGIApp, names: Iterable[str], *, any_ip: bool = False) -> None:
        self.app = app
        self.names = frozenset(names)
        self.any_ip = any_ip

    def allows(self, header: str) -> bool:
        name = host_of(header)
        return name is not None and (name in self.names or (self.any_ip and _is_ip(name)))

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] in ("http", "websocket"):
            header = next((v.decode("latin-1") for k, v in scope.get("headers", []) if k == b"host"), "")
            if not self.allows(header):
                response = PlainTextResponse(
                    f"Invalid Host header {header!r}: this dashboard answers {', '.join(sorted(self.names))}"
                    f"{' and IP addresses' if self.any_ip else ''}; start it with --allowed-host NAME to add a name",
                    status_code=400,
                )
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)
