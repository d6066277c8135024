"""The comparison view: runs grouped into cells, read from the store, as plain JSON values.

:func:`compare` answers what the comparison page paints first (the table,
the trade-off, the sweeps, the ECDF; the dashboard's page and JSON API and
the static report of a scenario); :func:`compare_curves` the per-round
curves, which the page fetches after that. What :func:`compare` reads does
not grow with the store's history, and but for one statistic's per-round
means (``ahead_from``) not with the runs' rounds either: the runs asked
for, the last round of statistics of each (one indexed lookup) and the
device rows of only the last evaluated round. The curves are summed per
round by SQLite, only for the statistics drawn; a report asks for at most
a bounded number of rounds per cell (``max_points``).

The rules for cells (one run per seed, labels by what differs, nothing
pooled silently) are :mod:`term_fl.comparison.cells`'; the numbers of a
cell (statistics, paired differences against every baseline, tests, marks)
are :func:`term_fl.comparison.table.compare_cells`', through
:mod:`term_fl.dashboard.compare_stats`: the same as the sweep's.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

import numpy as np

from term_fl.comparison import cells as cc
from term_fl.comparison.pairing import BASELINES
from term_fl.comparison.table import (CHOSEN, CHOSEN_MARK, DIFFERENCE_FIELDS, SIGNIFICANT_MARK, difference_columns,
                                      significance_notes)
from term_fl.dashboard.compare_stats import add_comparison, mark_chosen, notices, round_curves, sweeps
from term_fl.dashboard.queries import (
    CURVE_PANELS,
    HEADLINE,
    LIFT,
    PARAM_KEYS,
    PRIMARY,
    SPLIT_LABELS,
    STRATEGIES,
    TRADEOFF,
    BadQuery,
    NotFound,
    run_row,
    runs_csv,
    statistics,
    to_csv,
)
from term_fl.common.jsonable import plain
from term_fl.common.keys import EVAL_SPLITS
from term_fl.results import ResultsStore, RunInfo
from term_fl.strategies.registry import cell_label, strategy_order


def compare(store: ResultsStore, run_ids: Sequence[str] | None = None, scenario: str | None = None) -> dict[str, Any]:
    """Cells of the given runs (any status) or of a scenario's finished runs, with what the page paints first.

    Everything but the per-round curves (:func:`compare_curves`): the size of
    the answer and the time it takes do not grow with the runs' rounds, but
    for one statistic (the lift, worst 10%) summed per round by SQLite, which
    ``ahead_from`` needs.
    """
    return _answer(store, _group(store, run_ids, scenario))


def compare_curves(
    store: ResultsStore,
    run_ids: Sequence[str] | None = None,
    scenario: str | None = None,
    *,
    max_points: int | None = None,
) -> dict[str, Any]:
    """The per-round curves of the cells of :func:`compare` (same arguments): per cell, split and statistic
    the mean ± standard error over the cell's seeds in every evaluated round.

    ``max_points``: at most this many rounds per cell, evenly spaced over the
    evaluated rounds, the first and the last always among them (for a static
    report: its size and cost then stay bounded however long the runs are);
    a thinned cell says ``thinned: true`` and how many rounds it has in all.
    """
    return _curves_answer(store, _group(store, run_ids, scenario), max_points)


def compare_with_curves(
    store: ResultsStore, scenario: str, *, max_points: int | None = None
) -> tuple[dict[str, Any], dict[str, Any]]:
    """:func:`compare` and :func:`compare_curves` of a scenario, its runs read once (the static report)."""
    grouped = _group(store, None, scenario)
    curves = _curves_answer(store, grouped, max_points)
    known = {c["key"]: {split: {LIFT: by_key[LIFT]} for split, by_key in c["curves"].items()}
             for c in curves["cells"] if not c["thinned"]}  # fmt: skip
    return _answer(store, grouped, known), curves


class _Grouped(NamedTuple):
    title: str
    scenario: str | None
    infos: list[RunInfo]
    rows: dict[str, dict[str, Any]]
    cells: list[dict[str, Any]]
    varying: list[str]


def _group(store: ResultsStore, run_ids: Sequence[str] | None, scenario: str | None) -> _Grouped:
    """The runs asked for, their last round's statistics, and the cells they form (labelled by what differs)."""
    if run_ids:
        infos = [store.get_run(run_id) for run_id in dict.fromkeys(run_ids)]
        title = f"{len(infos)} runs"
    elif scenario:
        infos = store.list_runs(scenario=scenario, status="finished")
        if not infos:
            raise NotFound(f"no finished runs of scenario {scenario!r} in {store.path}")
        title = f"scenario {scenario}"
    else:
        raise BadQuery("give the runs to compare (runs=id1,id2,...) or a scenario (scenario=NAME)")
    final = store.final_stats(info.run_id for info in infos)
    rows = {info.run_id: run_row(info, final.get(info.run_id, {})) for info in infos}
    cells = _cells(infos, rows)
    labels, varying = cc.cell_labels([c["label"] for c in cells], [c["settings"] for c in cells],
                                     strategies=[c["strategy"] for c in cells])  # fmt: skip
    for cell, label in zip(cells, labels, strict=True):
        cell["label"] = label
    return _Grouped(title, None if run_ids else scenario, infos, rows, cells, varying)


def _answer(
    store: ResultsStore, grouped: _Grouped, lift_curves: dict[str, dict[str, dict[str, Any]]] | None = None
) -> dict[str, Any]:
    """The first-paint answer: the cells' final statistics, differences, choices, ECDFs and notices
    (``lift_curves``: the lift statistic's per-round curves of some cells, if already read)."""
    title, infos, rows, varying = grouped.title, grouped.infos, grouped.rows, grouped.varying
    cells = [dict(c) for c in grouped.cells]  # the curves' answer reads the same cells: left as they are
    add_comparison(store, cells, rows, dict(lift_curves or {}))
    for cell in cells:
        _final_devices(store, cell, [rows[r] for r in cell["run_ids"]])
    mark_chosen(store, cells, infos)
    runs = [dict(row) for row in rows.values()]
    for row in runs:
        cell = next(c for c in cells if row["run_id"] in c["all_run_ids"])
        row["cell"], row["counted"] = cell["label"], row["run_id"] in cell["run_ids"]
    references = {c["reference"] for c in cells if c["reference"]}
    reference = references.pop() if len(references) == 1 else None
    reference_cell = next((c for c in cells if c["key"] == reference), None)
    pairs = [d["n"] for c in cells for by_split in c["differences"].values() for d in by_split["test"].values()]
    return plain(
        {
            "title": title,
            "scenario": grouped.scenario,
            "statistics": statistics(),
            "strategies": STRATEGIES,
            "splits": [{"key": s, "label": label} for s, label in SPLIT_LABELS.items()],
            "table_columns": list(HEADLINE),
            "difference_columns": list(PRIMARY),
            "curves": CURVE_PANELS,
            "tradeoff": TRADEOFF,
            "lift_stat": LIFT,
            "baselines": [{"strategy": b, "label": next(s["label"] for s in STRATEGIES if s["name"] == b)}
                          for b in BASELINES],  # fmt: skip
            "significance": {"notes": significance_notes(pairs), "chosen": CHOSEN,
                             "marks": {"significant": SIGNIFICANT_MARK, "chosen": CHOSEN_MARK}},  # fmt: skip
            "reference": reference,
            "reference_label": reference_cell["label"] if reference_cell else None,
            "varying": varying,
            "notices": notices(cells, varying, runs),
            "sweeps": sweeps(cells),
            "cells": [{k: v for k, v in c.items() if k != "settings"} for c in cells],
            "runs": runs,
        }
    )


def _curves_answer(store: ResultsStore, grouped: _Grouped, max_points: int | None) -> dict[str, Any]:
    """Per cell (key and label, as in the answer of :func:`compare`), its per-round curves."""
    if max_points is not None and max_points < 2:
        raise BadQuery(f"max_points must be at least 2 (the first and the last round), got {max_points}")
    keys = sorted({k for panel in CURVE_PANELS for k in panel.get("choices", [panel["key"]])})
    cells = []
    for cell in grouped.cells:
        rounds = None
        total = None
        longest = max((max(grouped.rows[r]["rounds_completed"], grouped.rows[r]["rounds_planned"])
                       for r in cell["run_ids"]), default=0)  # fmt: skip
        if max_points is not None and longest > max_points:  # more rounds than points: which were evaluated?
            evaluated = store.stats_rounds(cell["run_ids"])
            total = len(evaluated)
            if total > max_points:
                rounds = thin(evaluated, max_points)
        cells.append({
            "key": cell["key"], "label": cell["label"], "thinned": rounds is not None,
            "evaluated_rounds": total, "curves": round_curves(store, cell["run_ids"], keys, rounds),
        })  # fmt: skip
    return {"max_points": max_points, "statistics": keys, "cells": cells}


def thin(rounds: Sequence[int], max_points: int) -> list[int]:
    """At most ``max_points`` of ``rounds`` (sorted), evenly spaced by position, the first and the last kept."""
    if len(rounds) <= max_points:
        return list(rounds)
    positions = np.unique(np.round(np.linspace(0, len(rounds) - 1, max_points)).astype(np.int64))
    return [rounds[i] for i in positions.tolist()]


def _cells(infos: Sequence[RunInfo], rows: Mapping[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """Runs grouped by config_hash; per cell the runs it counts (one per seed) and its settings."""
    groups: dict[str, list[RunInfo]] = {}
    for info in infos:
        groups.setdefault(info.config_hash, []).append(info)
    cells = []
    for key, members in groups.items():
        counted, repeats = cc.counted_runs([rows[m.run_id] for m in members])
        first = next(m for m in members if m.run_id == counted[-1]["run_id"])
        params = rows[first.run_id]["params"]
        cells.append({
            "key": key,
            "label": cell_label({"name": first.strategy, **params}),
            "short_label": " ".join(cell_label({"name": first.strategy, **params}).split()[1:]) or first.strategy,
            "strategy": first.strategy,
            "params": params,
            "settings": cc.flat_settings(first.config, first.strategy_params),
            "scenarios": sorted({m.scenario for m in members}),
            "seeds": [r["seed"] for r in counted],
            "n": len(counted),
            "repeats": {str(seed): ids for seed, ids in repeats.items()},
            "run_ids": [r["run_id"] for r in counted],
            "all_run_ids": [m.run_id for m in members],
            "rounds": first.rounds_planned,
            "running": sum(r["status"] == "running" for r in counted),
        })  # fmt: skip
    cells.sort(key=lambda c: (strategy_order(c["strategy"]), c["strategy"],
                              *(_sort_value(c["params"].get(k)) for k in PARAM_KEYS), c["key"]))  # fmt: skip
    return cells


def _sort_value(value: Any) -> tuple[bool, float]:
    return (value is None, value or 0.0)


def _final_devices(store: ResultsStore, cell: dict[str, Any], members: list[dict[str, Any]]) -> None:
    """The ECDF of the final device accuracies of the cell's seeds, per split."""
    cell["ecdf"] = {}
    for split in EVAL_SPLITS:
        values: list[float] = []
        for m in members:
            last = (m["final"].get(split) or {}).get("round")
            if last is not None:
                values += store.load_round_devices(m["run_id"], last, split)["accuracy"].tolist()
        cell["ecdf"][split] = cc.ecdf(values)


# -- CSV ------------------------------------------------------------------------

CSV_TABLES = ("cells", "curves", "runs")


def compare_csv(
    store: ResultsStore, table: str, run_ids: Sequence[str] | None = None, scenario: str | None = None
) -> str:
    """One table of a comparison (of :func:`compare`'s runs) as CSV: ``cells``, ``curves`` (every
    evaluated round) or ``runs``."""
    if table not in CSV_TABLES:
        raise BadQuery(f"table must be one of {', '.join(CSV_TABLES)}, got {table!r}")
    if table == "curves":
        return curves_csv(compare_curves(store, run_ids, scenario))
    return table_csv(compare(store, run_ids, scenario), table)


def table_csv(data: Mapping[str, Any], table: str) -> str:
    """The ``cells`` or ``runs`` table of :func:`compare`'s answer as CSV."""
    if table == "cells":
        return _cells_csv(data)
    if table == "runs":
        return runs_csv(data["runs"], extra=("cell", "counted"))
    raise BadQuery(f"table must be cells or runs, got {table!r}")


def _cells_csv(data: Mapping[str, Any]) -> str:
    """Per cell: identity, seeds, and per split every statistic's mean, standard error and n, and the paired
    differences against each baseline cell (the columns of comparison.csv: ``SPLIT.STAT.minus_BASELINE.FIELD``)
    with the round from which the lift statistic stays ahead of it."""
    stats = [s["key"] for s in data["statistics"]]
    baselines = [b["strategy"] for b in data["baselines"]]
    header = ["cell", "strategy", *PARAM_KEYS, "n_seeds", "seeds", "repeated_seeds", "rounds", "chosen", "config_hash",
              "run_ids", *(f"minus_{b}" for b in baselines)]  # fmt: skip
    for split in SPLIT_LABELS:
        header += [f"{split}.{k}.{m}" for k in stats for m in ("mean", "se", "n")]
        header += [f"{split}.{k}.minus_{b}.{f}" for b in baselines for k in stats for f in DIFFERENCE_FIELDS]
        header += [f"{split}.{data['lift_stat']}.ahead_of_{b}_from_round" for b in baselines]
    rows = []
    for c in data["cells"]:
        flat = difference_columns(c["differences"])
        row = [c["label"], c["strategy"], *(c["params"].get(k) for k in PARAM_KEYS), c["n"],
               " ".join(map(str, c["seeds"])), " ".join(c["repeats"]), c["rounds"], int(bool(c["chosen"])), c["key"],
               " ".join(c["run_ids"]), *(c["baselines"].get(b) for b in baselines)]  # fmt: skip
        for split in SPLIT_LABELS:
            row += [c["stats"][split][k][m] for k in stats for m in ("mean", "se", "n")]
            row += [flat.get(f"{split}.{k}.minus_{b}.{f}") for b in baselines for k in stats for f in DIFFERENCE_FIELDS]
            row += [((c["ahead"].get(b) or {}).get(split) or {}).get("round") for b in baselines]
        rows.append(row)
    return to_csv(header, rows)


CURVES_CSV_HEADER = ("cell", "split", "statistic", "round", "mean", "se", "n_seeds")


def curves_csv(curves: Mapping[str, Any]) -> str:
    """Per cell, split, statistic and round (:func:`compare_curves`' answer): mean, standard error and number
    of seeds (long format). A static report builds the same table in the browser (compare.js)."""
    rows = (
        [c["label"], split, key, *values]
        for c in curves["cells"]
        for split, by_key in c["curves"].items()
        for key, curve in by_key.items()
        for values in zip(curve["round"], curve["mean"], curve["se"], curve["n"], strict=True)
    )
    # the curves are plain JSON values (comparison_cells.curve): no NaN to look for
    return to_csv(CURVES_CSV_HEADER, rows, finite=True)
