"""Fairness dashboard (web) and static report over a term-fl results store.

- :func:`create_app` — the FastAPI app (pages + JSON API, OpenAPI at ``/openapi.json``);
- :func:`serve` — run it with uvicorn (``term-fl dashboard``);
- :func:`write_report` — one self-contained HTML file for a run or a scenario (``term-fl report``).

The dashboard only reads the store (SQLite ``mode=ro``); charts use the
plotly.js bundled with the plotly package, so nothing is loaded from a CDN.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from term_fl.dashboard.app import create_app
    from term_fl.dashboard.report import ReportError, write_report

__all__ = ["ReportError", "create_app", "serve", "write_report"]


def __getattr__(name: str) -> Any:
    """The web app and the report load on first use: ``term-fl runs`` reads
    :mod:`term_fl.dashboard.queries` without importing FastAPI."""
    if name == "create_app":
        from term_fl.dashboard.app import create_app

        return create_app
    if name in ("ReportError", "write_report"):
        from term_fl.dashboard import report

        return getattr(report, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def serve(
    db: str | os.PathLike[str],
    host: str = "127.0.0.1",
    port: int = 8050,
    *,
    allowed_hosts: Iterable[str] = (),
    token: str | None = None,
    log_level: str | None = None,
    access_log: bool = False,
) -> None:
    """Serve the dashboard of the store ``db`` at http://host:port/ until interrupted (Ctrl-C, SIGTERM).

    Binds to the loopback interface by default. ``token``: the access token
    every request must carry (:mod:`term_fl.dashboard.access`; ``term-fl
    dashboard`` makes one for any other ``host``).
    ``access_log`` logs every HTTP request (off: pages poll the API every 3 s
    while a run is running, which would print a line each time). uvicorn
    prints warnings and errors only (``log_level`` None: "info" with the
    access log, which logs at that level, else "warning"). Requests are
    answered only for the ``Host:`` names of the bound address, loopback
    names, this machine's name and ``allowed_hosts`` (DNS-rebinding guard,
    :mod:`term_fl.dashboard.hosts`).
    """
    import uvicorn

    from term_fl.dashboard.app import create_app
    from term_fl.dashboard.hosts import allowed_host_names

    names, any_ip = allowed_host_names(host, allowed_hosts)
    app = create_app(db, allowed_hosts=names, any_ip_host=any_ip, token=token)
    check_free(host, port)
    level = log_level or ("info" if access_log else "warning")
    uvicorn.run(app, host=host, port=port, log_level=level, access_log=access_log)


def check_free(host: str, port: int) -> None:
    """A ConfigError naming the address when the server could not listen there (in use, not this machine's)."""
    import socket

    from term_fl.common.errors import ConfigError

    try:
        family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
        with socket.socket(family, kind, proto) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn sets it
            probe.bind(address)
    except OSError as exc:
        raise ConfigError(f"--host {host} --port {port}: cannot listen there ({exc.strerror or exc}); give "
                          "another --port, or an address of this machine") from None
