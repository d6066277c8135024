"""A static, self-contained HTML report of one run or of a scenario's finished runs.

The report is the dashboard's run page or comparison page with everything
inlined: CSS, plotly.js (from the plotly package), the page scripts and the
data (the same JSON the API serves) in a ``<script type="application/json">``
block. It opens from disk with no server and no network.
"""

from __future__ import annotations

import os
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from term_fl.dashboard import compare_view, queries
from term_fl.dashboard.render import render
from term_fl.common.keys import EVAL_SPLITS
from term_fl.results import ResultsStore


class ReportError(LookupError):
    """The report's subject is neither a run id nor a scenario with finished runs in the store."""


def write_report(db: str | os.PathLike[str], run_or_scenario: str, out_path: str | os.PathLike[str]) -> Path:
    """Write the report of a run (by run id) or of a scenario (all its finished runs) to ``out_path``.

    A run id takes precedence over a scenario of the same name. Returns the
    written path. Raises :class:`~term_fl.results.StoreError` naming the path
    when the database is missing or unreadable, and :class:`ReportError`
    (listing the scenarios there are) when ``run_or_scenario`` matches nothing.
    """
    db = Path(db).expanduser().resolve()
    with ResultsStore.open_readonly(db) as store:
        if store.has_run(run_or_scenario):
            html = _run_report(store, run_or_scenario, db)
        elif store.count_runs(scenario=run_or_scenario, status="finished"):
            html = _compare_report(store, run_or_scenario, db)
        else:
            raise ReportError(_nothing_found(store, run_or_scenario))
    out = Path(out_path)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(html, encoding="utf-8")
    return out


def _run_report(store: ResultsStore, run_id: str, db: Path) -> str:
    """The run page with its data inlined: every round's devices, every device's history, the CSVs."""
    rounds = queries.round_series(store, run_id)
    weights = queries.weights_matrix(store, run_id)
    data = {
        "run": queries.run_detail(store, run_id),
        "rounds": rounds,
        "weights": weights,
        "devices": {},
        "device_histories": queries.device_histories(store, run_id),
        "csv": {"rounds": queries.rounds_csv(rounds), "devices": queries.device_rows_csv(store, run_id)},
    }
    for split in EVAL_SPLITS:
        by_round = queries.device_rounds(store, run_id, split)
        data["devices"][split] = {"rounds": sorted(by_round), "by_round": {str(r): d for r, d in by_round.items()}}
    return render("run.html", report=data, run=data["run"], csv_urls={"rounds": "", "devices": ""}, db=str(db),
                  generated=provenance([data["run"]["config_hash"]]))


REPORT_CURVE_POINTS = 100
"""A scenario report's per-round curves hold at most this many rounds per cell (evenly spaced, the first and
the last kept): the report's size and the time to write it do not grow with the runs' length."""


def _compare_report(store: ResultsStore, scenario: str, db: Path) -> str:
    """The comparison page of a scenario's finished runs with its data and its CSVs inlined.

    The per-round curves are inlined once, as data; the page builds their CSV
    from them (compare.js), every round the report holds.
    """
    compare, curves = compare_view.compare_with_curves(store, scenario, max_points=REPORT_CURVE_POINTS)
    data = {"compare": compare, "curves": curves,
            "csv": {t: compare_view.table_csv(compare, t) for t in ("cells", "runs")}}  # fmt: skip
    hashes = sorted({run["config_hash"] for run in compare["runs"] if run.get("config_hash")})
    return render("compare.html", report=data, compare=compare, query={"runs": "", "scenario": scenario},
                  csv_urls={t: "" for t in compare_view.CSV_TABLES}, db=str(db),
                  generated=provenance(hashes))  # fmt: skip


def provenance(config_hashes: list[str]) -> dict[str, Any]:
    """What the report's header says about its making: the time (ISO 8601, UTC), term-fl's version and the
    config hashes of the runs it shows (one per cell: :func:`term_fl.config.config_hash`)."""
    from term_fl import __version__

    now = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {"time": now, "version": __version__, "config_hashes": config_hashes}


def _nothing_found(store: ResultsStore, subject: str) -> str:
    runs = store.list_runs()
    finished = sorted({r.scenario for r in runs if r.status == "finished"})
    same_scenario = [r for r in runs if r.scenario == subject]
    if same_scenario:
        return (
            f"scenario {subject!r} has no finished run in {store.path} ({len(same_scenario)} runs, none "
            "finished); for a report of one of its runs, give its run id"
        )
    hint = f"scenarios with finished runs: {', '.join(finished)}" if finished else "it holds no finished run"
    return f"{subject!r} is neither a run id nor a scenario in {store.path} ({len(runs)} runs; {hint})"
