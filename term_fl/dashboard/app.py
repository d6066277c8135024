"""The fairness dashboard: a FastAPI app over a results store, read-only.

Pages (server-rendered, every value escaped) and the JSON API they poll.
The store is opened read-only (SQLite ``mode=ro``) for every request, so the
dashboard may start before the first run, follows a store that a running
experiment writes, and never changes the file. A missing or unreadable store
answers 503 with a message naming the path; an unknown run 404.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, FastAPI, Query, Request
from fastapi.exception_handlers import request_validation_exception_handler
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, HTMLResponse, JSONResponse, Response
from fastapi.staticfiles import StaticFiles
from pydantic import BaseModel
from starlette.exceptions import HTTPException

from term_fl.dashboard import queries
from term_fl.dashboard.hosts import HostGuard
from term_fl.dashboard.render import PLOTLY_JS, STATIC_DIR, render
from term_fl.results import RUN_STATUSES, ResultsStore, RunNotFound, StoreError

Split = Literal["test", "val"]  # term_fl.results.SPLITS


class ErrorMessage(BaseModel):
    """An error answer of the JSON API."""

    detail: str


ERRORS: dict[int | str, dict[str, Any]] = {
    404: {"model": ErrorMessage, "description": "No such run, round or scenario in the store"},
    503: {"model": ErrorMessage, "description": "The results database is missing or unreadable (names the path)"},
}

DESCRIPTION = """Read-only fairness dashboard of a term-fl results store.

Statistics are those of DESIGN.md 'Fairness statistics' (keys of `term_fl.fairness`:
`pooled_mean` is the average over test samples, `worst_10` / `best_10` the mean of the
lowest / highest 10% of device accuracies, `std`, `jain`, loss risks `var`, `cvar`,
`evar`, `tivar` ...), per split `test` and `val`. Non-finite numbers are `null`.
"""


def create_app(
    db_path: str | os.PathLike[str],
    *,
    allowed_hosts: Iterable[str] | None = None,
    any_ip_host: bool = False,
) -> FastAPI:
    """The dashboard app for the results store at ``db_path`` (resolved to an absolute path).

    Serve it with uvicorn (:func:`term_fl.dashboard.serve`). The file need not
    exist yet: until it does, pages and API answer 503 naming the path.
    ``allowed_hosts``: the ``Host:`` names to answer (others get 400; see
    :mod:`term_fl.dashboard.hosts`); None answers any (``serve`` always
    passes the names of the address it binds).
    """
    db = Path(db_path).expanduser().resolve()
    app = FastAPI(
        title="term-fl dashboard",
        description=DESCRIPTION,
        docs_url=None,  # Swagger UI and ReDoc load their assets from a CDN
        redoc_url=None,
        openapi_url="/openapi.json",
    )
    app.state.db_path = db
    _add_error_handlers(app, db)
    app.include_router(_api_router())
    app.include_router(_page_router(db))
    app.mount("/static", StaticFiles(directory=STATIC_DIR), name="static")
    if allowed_hosts is not None:
        app.add_middleware(HostGuard, names=allowed_hosts, any_ip=any_ip_host)
    return app


def open_store(request: Request) -> Iterator[ResultsStore]:
    """The app's store, opened read-only for one request (StoreError if missing or unreadable)."""
    store = ResultsStore.open_readonly(request.app.state.db_path)
    try:
        yield store
    finally:
        store.close()


Store = Annotated[ResultsStore, Depends(open_store)]


# -- JSON API -----------------------------------------------------------------


def _api_router() -> APIRouter:
    api = APIRouter(prefix="/api", tags=["results"], responses=ERRORS)

    @api.get("/runs", summary="List runs, newest first")
    def runs(
        store: Store,
        scenario: Annotated[str | None, Query(description="Only runs of this scenario")] = None,
        status: Annotated[Literal[RUN_STATUSES] | None, Query(description="Only runs with this status")] = None,  # type: ignore[valid-type]
        strategy: Annotated[str | None, Query(description="Only runs of this strategy (fedavg, qffl, term)")] = None,
    ) -> list[dict[str, Any]]:
        """Each run with its strategy parameters (t, q, tau, lam), progress, and the
        statistics of its last round per split (`final.test`, `final.val`)."""
        return queries.list_runs(store, scenario=scenario, status=status, strategy=strategy)

    @api.get("/runs/{run_id:path}/rounds", summary="Fairness statistics and loss risks per round")
    def rounds(store: Store, run_id: str) -> dict[str, Any]:
        """`splits.<split>.<statistic>` is a list over `splits.<split>.round`."""
        return queries.round_series(store, run_id)

    @api.get("/runs/{run_id:path}/devices", summary="Per-device accuracy and loss at one round")
    def devices(
        store: Store,
        run_id: str,
        round: Annotated[int | None, Query(description="The round (default: the last evaluated one)")] = None,
        split: Annotated[Split, Query(description="test or val")] = "test",
    ) -> dict[str, Any]:
        """`devices` (name `device 7` etc., accuracy, loss, correct, examples) of `round`,
        and `rounds`: every round with evaluations of this split."""
        return queries.devices_at(store, run_id, round=round, split=split)

    @api.get("/runs/{run_id:path}/weights", summary="Tilted weight of every device in every round")
    def weights(store: Store, run_id: str) -> dict[str, Any]:
        """A heatmap matrix: `weights[i][j]` is the aggregation weight of device
        `partition_ids[i]` in round `rounds[j]`, `null` where it was not sampled."""
        return queries.weights_matrix(store, run_id)

    @api.get("/runs/{run_id:path}", summary="One run: settings, progress, per-round bookkeeping")
    def run(store: Store, run_id: str) -> dict[str, Any]:
        """Run ids may hold `/` (matched after the `/rounds`, `/devices`, `/weights` routes).

        The run's list entry plus `config`, `data`, `strategy_params`, `error`, `summary`
        and `rounds` (status, running estimate, sampled / included devices, exclusions)."""
        return queries.run_detail(store, run_id)

    @api.get("/compare", summary="Compare runs: mean ± standard error over seeds per cell")
    def compare(
        store: Store,
        runs: Annotated[str | None, Query(description="Comma-separated run ids (any status)")] = None,
        scenario: Annotated[str | None, Query(description="All finished runs of this scenario")] = None,
        run: Annotated[list[str] | None, Query(description="A run id, repeatable (for ids holding a comma)")] = None,
    ) -> dict[str, Any]:
        """Runs grouped by `config_hash` (same settings, other seeds). Per cell and split:
        mean and standard error (sample std / sqrt(n); null for one seed) of the final
        average, worst 10%, best 10%, std, and the pooled final device accuracies."""
        return queries.compare(store, run_ids=_split_ids(runs, run), scenario=scenario)

    return api


def _split_ids(runs: str | None, run: list[str] | None = None) -> list[str] | None:
    """Run ids from ``runs=a,b`` and from repeated ``run=`` (which may hold commas)."""
    ids = [r.strip() for r in runs.split(",") if r.strip()] if runs else []
    ids += [r for r in run or [] if r]
    return ids or None


# -- pages --------------------------------------------------------------------


def _page_router(db: Path) -> APIRouter:
    pages = APIRouter(include_in_schema=False, default_response_class=HTMLResponse)

    @pages.get("/")
    def runs_page(store: Store) -> str:
        runs = queries.list_runs(store)
        options = {key: sorted({r[key] for r in runs}) for key in ("status", "scenario", "strategy")}
        return render("runs.html", runs=runs, options=options, db=str(db))

    @pages.get("/runs/{run_id:path}")
    def run_page(store: Store, run_id: str) -> str:
        return render("run.html", run=queries.run_detail(store, run_id), db=str(db))

    @pages.get("/compare")
    def compare_page(
        store: Store, runs: str | None = None, scenario: str | None = None, run: Annotated[list[str] | None, Query()] = None
    ) -> str:
        ids = _split_ids(runs, run)
        data = queries.compare(store, run_ids=ids, scenario=scenario)
        query = {"runs": runs or "", "run_ids": ids or [], "scenario": scenario or ""}
        return render("compare.html", compare=data, query=query, db=str(db))

    @pages.get("/vendor/plotly.min.js", response_class=FileResponse)
    def plotly_js() -> FileResponse:
        return FileResponse(PLOTLY_JS, media_type="text/javascript", headers={"Cache-Control": "max-age=86400"})

    return pages


# -- errors -------------------------------------------------------------------


def _add_error_handlers(app: FastAPI, db: Path) -> None:
    """Errors as JSON under /api/ and as an HTML page elsewhere, never a traceback."""

    def answer(request: Request, status: int, title: str, message: str) -> Response:
        if request.url.path.startswith("/api/") or request.url.path == "/openapi.json":
            return JSONResponse({"detail": message}, status_code=status)
        return HTMLResponse(render("error.html", status=status, title=title, message=message, db=str(db)),
                            status_code=status)  # fmt: skip

    @app.exception_handler(RunNotFound)
    def run_not_found(request: Request, exc: RunNotFound) -> Response:
        return answer(request, 404, "Run not found", str(exc))

    @app.exception_handler(queries.NotFound)
    def not_found(request: Request, exc: queries.NotFound) -> Response:
        return answer(request, 404, "Not found", str(exc))

    @app.exception_handler(StoreError)
    def store_error(request: Request, exc: StoreError) -> Response:
        return answer(request, 503, "Results database unavailable", str(exc))

    @app.exception_handler(sqlite3.DatabaseError)
    def database_error(request: Request, exc: sqlite3.DatabaseError) -> Response:
        return answer(request, 503, "Results database unreadable", f"cannot read the results database {db}: {exc}")

    @app.exception_handler(queries.BadQuery)
    def bad_query(request: Request, exc: queries.BadQuery) -> Response:
        return answer(request, 400, "Bad request", str(exc))

    @app.exception_handler(HTTPException)
    def http_error(request: Request, exc: HTTPException) -> Response:
        return answer(request, exc.status_code, "Error", str(exc.detail))

    @app.exception_handler(RequestValidationError)
    async def invalid_request(request: Request, exc: RequestValidationError) -> Response:
        if request.url.path.startswith("/api/"):
            return await request_validation_exception_handler(request, exc)
        problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
        return answer(request, 422, "Invalid request", problems)
