"""Fairness dashboard (web) and static report over a term-fl results store.

- :func:`create_app` — the FastAPI app (pages + JSON API, OpenAPI at ``/openapi.json``);
- :func:`serve` — run it with uvicorn (``term-fl dashboard``);
- :func:`write_report` — one self-contained HTML file for a run or a scenario (``term-fl report``).

The dashboard only reads the store (SQLite ``mode=ro``); charts use the
plotly.js bundled with the plotly package, so nothing is loaded from a CDN.
"""

from __future__ import annotations

import os

from term_fl.dashboard.app import create_app
from term_fl.dashboard.report import ReportError, write_report

__all__ = ["ReportError", "create_app", "serve", "write_report"]


def serve(
    db: str | os.PathLike[str],
    host: str = "127.0.0.1",
    port: int = 8050,
    *,
    log_level: str = "info",
    access_log: bool = False,
) -> None:
    """Serve the dashboard of the store ``db`` at http://host:port/ until interrupted (Ctrl-C).

    Binds to the loopback interface by default: the dashboard has no
    authentication, so pass another ``host`` only on a trusted network.
    ``access_log`` logs every HTTP request (off: pages poll the API every 3 s
    while a run is running, which would print a line each time).
    """
    import uvicorn

    uvicorn.run(create_app(db), host=host, port=port, log_level=log_level, access_log=access_log)
