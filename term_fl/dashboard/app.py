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
from urllib.parse import quote, urlencode

from fastapi import APIRouter, Depends, FastAPI, Query, Request
from fastapi.exception_handlers import request_validation_exception_handler
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, HTMLResponse, JSONResponse, Response
from fastapi.staticfiles import StaticFiles
from pydantic import BaseModel
from starlette.exceptions import HTTPException

from term_fl.dashboard import compare_view, queries
from term_fl.dashboard.access import TokenGuard
from term_fl.dashboard.headers import SecurityHeaders
from term_fl.dashboard.hosts import HostGuard
from term_fl.dashboard.render import PLOTLY_JS, STATIC_DIR, file_stem, path_segment, render, script_json
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

Statistics are those of docs/maths.md 'Fairness statistics' (keys of `term_fl.maths.fairness`:
`pooled_mean` is the average over test samples, `worst_10` / `best_10` the mean of the
lowest / highest 10% of device accuracies, `std`, `jain`, loss risks `var`, `cvar`,
`evar`, `tivar` ...), per split `test` and `val`. Non-finite numbers are `null`.
"""


def create_app(
    db_path: str | os.PathLike[str],
    *,
    allowed_hosts: Iterable[str] | None = None,
    any_ip_host: bool = False,
    token: str | None = None,
) -> FastAPI:
    """The dashboard app for the results store at ``db_path`` (resolved to an absolute path).

    Serve it with uvicorn (:func:`term_fl.dashboard.serve`). The file need not
    exist yet: until it does, pages and API answer 503 naming the path.
    ``allowed_hosts``: the ``Host:`` names to answer (others get 400; see
    :mod:`term_fl.dashboard.hosts`); None answers any (``serve`` always
    passes the names of the address it binds). ``token``: the access token
    every request must carry (:mod:`term_fl.dashboard.access`); None asks
    for none.
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
    if token is not None:
        app.add_middleware(TokenGuard, token=token)
    if allowed_hosts is not None:  # added last: the Host check comes first
        app.add_middleware(HostGuard, names=allowed_hosts, any_ip=any_ip_host)
    app.add_middleware(SecurityHeaders)  # outermost: the Host guard's refusals carry the headers too
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


RunsFilter = dict[str, Any]
PAGE_SIZE = 50
MAX_LIMIT = 1000
MAX_OFFSET = 2**63 - 1 - MAX_LIMIT  # SQLite's integers are 64-bit


def runs_filter(
    scenario: Annotated[str | None, Query(description="Only runs of this scenario")] = None,
    status: Annotated[Literal[(*RUN_STATUSES, "")] | None, Query(description="Only runs with this status ('': any)")] = None,  # type: ignore[valid-type]
    strategy: Annotated[str | None, Query(description="Only runs of this strategy (fedavg, qffl, term ...)")] = None,
    q: Annotated[str | None, Query(description="Only runs whose id or name contains this text (any case)")] = None,
) -> RunsFilter:
    """The filters of the runs list, as keyword arguments of queries.list_runs."""
    return {"scenario": scenario or None, "status": status or None, "strategy": strategy or None, "text": q or None}


Filters = Annotated[RunsFilter, Depends(runs_filter)]


def csv_response(text: str, filename: str) -> Response:
    return Response(text, media_type="text/csv; charset=utf-8",
                    headers={"Content-Disposition": f'attachment; filename="{filename}"'})  # fmt: skip


def _api_router() -> APIRouter:
    api = APIRouter(prefix="/api", tags=["results"], responses=ERRORS)

    @api.get("/runs", summary="List runs, newest first, a page at a time")
    def runs(
        store: Store,
        response: Response,
        filters: Filters,
        limit: Annotated[int, Query(ge=1, le=MAX_LIMIT, description="Runs per page")] = PAGE_SIZE,
        offset: Annotated[int, Query(ge=0, le=MAX_OFFSET, description="Runs to skip (newest first)")] = 0,
    ) -> list[dict[str, Any]]:
        """Each run with its strategy parameters (t, q, tau, lam), progress, and the
        statistics of its last round per split (`final.test`, `final.val`). The header
        `X-Total-Count` holds the number of matching runs."""
        response.headers["X-Total-Count"] = str(store.count_runs(**filters))
        return queries.list_runs(store, **filters, limit=limit, offset=offset)

    @api.get("/runs.csv", summary="Every matching run as CSV", response_class=Response)
    def runs_csv(store: Store, filters: Filters) -> Response:
        """One row per run (no paging): identity, strategy parameters, progress, and every
        statistic of its last round per split (`test.worst_10` ...)."""
        return csv_response(queries.runs_csv(queries.list_runs(store, **filters)), "runs.csv")

    # Run ids may hold '/': the routes below a run come before the run itself.
    @api.get("/runs/{run_id:path}/rounds.csv", summary="Fairness statistics per round as CSV", response_class=Response)
    def rounds_csv(store: Store, run_id: str) -> Response:
        """One row per round and split, one column per statistic."""
        return csv_response(queries.rounds_csv(queries.round_series(store, run_id)), f"{file_stem(run_id)}-rounds.csv")

    @api.get("/runs/{run_id:path}/rounds", summary="Fairness statistics and loss risks per round")
    def rounds(store: Store, run_id: str) -> dict[str, Any]:
        """`splits.<split>.<statistic>` is a list over `splits.<split>.round`."""
        return queries.round_series(store, run_id)

    @api.get("/runs/{run_id:path}/devices.csv", summary="Every device in every round as CSV", response_class=Response)
    def devices_csv(store: Store, run_id: str) -> Response:
        """One row per round and device: its training row (sampled, included, F_k, loss after
        training, tilted weight, training samples) and its evaluation per split."""
        return csv_response(queries.device_rows_csv(store, run_id), f"{file_stem(run_id)}-devices.csv")

    @api.get("/runs/{run_id:path}/devices/{partition_id}", summary="One device over the rounds")
    def device(store: Store, run_id: str, partition_id: int) -> dict[str, Any]:
        """`eval.<split>`: round, accuracy, loss, correct, examples; `train`: round, sampled,
        included, train_loss (F_k), train_loss_after, tilted_weight, num_examples."""
        return queries.device_history(store, run_id, partition_id)

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
        `partition_ids[i]` in round `rounds[j]`, `null` where it was not sampled;
        `examples[i]` and `loss[i]` (last test round) sort the rows."""
        return queries.weights_matrix(store, run_id)

    @api.get("/runs/{run_id:path}", summary="One run: settings, progress, per-round bookkeeping")
    def run(store: Store, run_id: str) -> dict[str, Any]:
        """Run ids may hold `/` (matched after the routes below a run).

        The run's list entry plus `config`, `data`, `strategy_params`, `error`, `status_note`
        (why a run is `lost`), `summary` and `rounds` (status, running estimate, sampled /
        included devices, exclusions)."""
        return queries.run_detail(store, run_id)

    @api.get("/compare", summary="Compare runs: cells, mean ± standard error over seeds, trade-off, ECDF")
    def compare(store: Store, which: Compared) -> Response:
        """Runs grouped into cells by `config_hash` (same settings, other seeds; a repeated seed
        counts once). Per cell and split: mean, standard error (sample std / sqrt(n); null for one
        seed) and n of every final statistic; against each baseline cell of the same settings
        (`baselines`: FedAvg ...) the paired differences with the paired t-test's `p_value`, Holm's
        `p_holm`, `ci95`, the sign-flip `p_signflip` and `significant` (`differences`; `significance`
        says the rule), and the round from which worst 10% stays ahead (`ahead`); the ECDF of the
        final device accuracies, and the cell chosen on validation; `notices` say what differs and
        what was left out. Its size does not grow with the runs' rounds: the per-round curves are
        `/api/compare/curves`."""
        # already plain JSON values (term_fl.common.jsonable.plain): sent as they are, without FastAPI's encoder pass
        return JSONResponse(compare_view.compare(store, run_ids=which["run_ids"], scenario=which["scenario"]))

    @api.get("/compare/curves", summary="Per-round curves of the compared cells: mean ± standard error over seeds")
    def compare_curves(
        store: Store,
        which: Compared,
        max_points: Annotated[
            int | None, Query(ge=2, description="At most this many rounds per cell, evenly spaced, first and last kept")
        ] = None,
    ) -> Response:
        """Per cell (`key` and `label` as in `/api/compare`), split and statistic: `round`, `mean`, `se`
        and `n` (seeds averaged) of every evaluated round, or of at most `max_points` of them
        (`thinned: true`, `evaluated_rounds` the count in all)."""
        return JSONResponse(compare_view.compare_curves(store, run_ids=which["run_ids"], scenario=which["scenario"],
                                                        max_points=max_points))  # fmt: skip

    @api.get("/compare.csv", summary="A table of the comparison as CSV", response_class=Response)
    def compare_csv(
        store: Store,
        which: Compared,
        table: Annotated[Literal["cells", "curves", "runs"], Query(description="Which table")] = "cells",
    ) -> Response:
        """`cells`: one row per cell; `curves`: per cell, split, statistic and every evaluated round
        (long format); `runs`: the compared runs with their final statistics."""
        text = compare_view.compare_csv(store, table, run_ids=which["run_ids"], scenario=which["scenario"])
        return csv_response(text, f"compare-{table}.csv")

    return api


def compared(
    runs: Annotated[str | None, Query(description="Comma-separated run ids (any status)")] = None,
    scenario: Annotated[str | None, Query(description="All finished runs of this scenario")] = None,
    run: Annotated[list[str] | None, Query(description="A run id, repeatable (for ids holding a comma)")] = None,
) -> dict[str, Any]:
    """What a comparison is of: run ids (from ``runs=a,b`` and repeated ``run=``), or a scenario."""
    return {"run_ids": _split_ids(runs, run), "scenario": scenario or None}


Compared = Annotated[dict[str, Any], Depends(compared)]


def _split_ids(runs: str | None, run: list[str] | None = None) -> list[str] | None:
    """Run ids from ``runs=a,b`` and from repeated ``run=`` (which may hold commas)."""
    ids = [r.strip() for r in runs.split(",") if r.strip()] if runs else []
    ids += [r for r in run or [] if r]
    return ids or None


def compare_csv_urls(which: dict[str, Any]) -> dict[str, str]:
    query = [("run", r) for r in which["run_ids"]] if which["run_ids"] else [("scenario", which["scenario"] or "")]
    return {t: "/api/compare.csv?" + urlencode([*query, ("table", t)]) for t in compare_view.CSV_TABLES}


def run_csv_urls(run_id: str) -> dict[str, str]:
    base = f"/api/runs/{path_segment(run_id)}"
    return {"devices": f"{base}/devices.csv", "rounds": f"{base}/rounds.csv"}


# -- pages --------------------------------------------------------------------


def _page_router(db: Path) -> APIRouter:
    pages = APIRouter(include_in_schema=False, default_response_class=HTMLResponse)

    @pages.get("/")
    def runs_page(
        store: Store, filters: Filters, page: Annotated[int, Query(ge=1, le=MAX_OFFSET // PAGE_SIZE)] = 1
    ) -> str:
        total = store.count_runs(**filters)
        runs = queries.list_runs(store, **filters, limit=PAGE_SIZE, offset=(page - 1) * PAGE_SIZE)
        options = {key: store.run_values(key) for key in ("scenario", "strategy")} | {"status": list(RUN_STATUSES)}
        chosen = {k: v for k, v in {**filters, "q": filters["text"]}.items() if v and k != "text"}
        pages_total = max(1, -(-total // PAGE_SIZE))
        link = lambda n: "/?" + urlencode({**chosen, "page": n})  # noqa: E731
        return render(
            "runs.html", runs=runs, options=options, filters=chosen, total=total, page=page, pages=pages_total,
            first=(page - 1) * PAGE_SIZE + 1, prev_url=link(page - 1) if page > 1 else None,
            next_url=link(page + 1) if page < pages_total else None,
            csv_url="/api/runs.csv" + ("?" + urlencode(chosen) if chosen else ""), db=str(db),
        )  # fmt: skip

    @pages.get("/runs/{run_id:path}")
    def run_page(store: Store, run_id: str) -> str:
        run = queries.run_detail(store, run_id)
        return render("run.html", run=run, csv_urls=run_csv_urls(run_id), db=str(db))

    @pages.get("/compare")
    def compare_page(store: Store, which: Compared) -> str:
        data = compare_view.compare(store, run_ids=which["run_ids"], scenario=which["scenario"])
        query = {"run_ids": which["run_ids"] or [], "scenario": which["scenario"] or ""}
        return render("compare.html", compare=data, query=query, csv_urls=compare_csv_urls(which),
                      initial=script_json(data), db=str(db))  # fmt: skip

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
