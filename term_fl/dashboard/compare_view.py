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
pooled silently) are :mod:`term_fl.comparison.cells`'.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

import numpy as np

from term_fl.comparison import cells as cc
from term_fl.comparison.summaries import family, select_by_validation
from term_fl.dashboard.queries import (
    CURVE_PANELS,
    DIFFERENCE_STATS,
    PARAM_KEYS,
    REFERENCE_STRATEGY,
    SPLIT_LABELS,
    STRATEGIES,
    TRADEOFF,
    TUNED,
    COMPARE_STATS,
    BadQuery,
    NotFound,
    run_row,
    runs_csv,
    statistics,
    to_csv,
)
from term_fl.common.jsonable import plain
from term_fl.common.keys import EVAL_SPLITS, SUMMARY_NAMES, VAL
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
    lift = TRADEOFF["y"][0]
    known = {c["key"]: {split: {lift: by_key[lift]} for split, by_key in c["curves"].items()}
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
    for cell in cells:
        members = [rows[r] for r in cell["run_ids"]]
        _summarise(cell, members)
        _final_devices(store, cell, members)
    reference = _add_references(store, cells, dict(lift_curves or {}))
    _mark_chosen(store, cells, infos)
    runs = [dict(row) for row in rows.values()]
    for row in runs:
        cell = next(c for c in cells if row["run_id"] in c["all_run_ids"])
        row["cell"], row["counted"] = cell["label"], row["run_id"] in cell["run_ids"]
    reference_cell = next((c for c in cells if c["key"] == reference), None)
    return plain(
        {
            "title": title,
            "scenario": grouped.scenario,
            "statistics": statistics(),
            "strategies": STRATEGIES,
            "splits": [{"key": s, "label": label} for s, label in SPLIT_LABELS.items()],
            "table_columns": list(COMPARE_STATS),
            "difference_columns": list(DIFFERENCE_STATS),
            "curves": CURVE_PANELS,
            "tradeoff": TRADEOFF,
            "lift_stat": TRADEOFF["y"][0],
            "reference": reference,
            "reference_label": reference_cell["label"] if reference_cell else None,
            "varying": varying,
            "notices": _notices(cells, varying, runs),
            "sweeps": _sweeps(cells),
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
            "evaluated_rounds": total, "curves": _curves(store, cell["run_ids"], keys, rounds),
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


def _summarise(cell: dict[str, Any], members: list[dict[str, Any]]) -> None:
    """Mean ± standard error over the cell's seeds of the final statistics, and each seed's values."""
    cell["stats"], cell["by_seed"] = {}, {}
    stat_keys = sorted({s["key"] for s in statistics()})
    for split in EVAL_SPLITS:
        finals = [m["final"].get(split) or {} for m in members]
        cell["stats"][split] = {k: cc.mean_se(f.get(k) for f in finals) for k in stat_keys}
        cell["stats"][split]["round"] = cc.mean_se(f.get("round") for f in finals)
        cell["by_seed"][split] = {k: {m["seed"]: f.get(k) for m, f in zip(members, finals, strict=True)}
                                  for k in stat_keys}  # fmt: skip


def _curves(
    store: ResultsStore, run_ids: Sequence[str], keys: Sequence[str], rounds: Sequence[int] | None = None
) -> dict[str, dict[str, dict[str, list[Any]]]]:
    """Per split and statistic, the per-round mean ± standard error over the runs (summed by SQLite)."""
    sums = store.round_stats_sums(run_ids, keys, rounds)
    return {
        split: {k: cc.curve(columns["round"], columns[k]["n"], columns[k]["sum"], columns[k]["sumsq"]) for k in keys}
        for split, columns in sums.items()
    }


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


def _outside(cell: Mapping[str, Any]) -> tuple[Any, ...]:
    """The cell's settings outside the strategy section (cells of one experiment share them)."""
    return cc.settings_key(cell["settings"], skip=lambda key: key.startswith("strategy."))


def _add_references(
    store: ResultsStore, cells: list[dict[str, Any]], lift_curves: dict[str, dict[str, dict[str, Any]]]
) -> str | None:
    """Per cell, paired differences against the reference (FedAvg) cell of the same other settings, and the
    round from which the cell's lift (worst 10%) stays ahead of the reference's (from their per-round means,
    read here for the cells not in ``lift_curves``)."""
    references = {_outside(c): c for c in cells if c["strategy"] == REFERENCE_STRATEGY}
    lift = TRADEOFF["y"][0]
    direction = next(s["direction"] for s in statistics() if s["key"] == lift)

    def lift_curve(cell: dict[str, Any], split: str) -> dict[str, list[Any]]:
        if cell["key"] not in lift_curves:
            lift_curves[cell["key"]] = _curves(store, cell["run_ids"], [lift])
        return (lift_curves[cell["key"]].get(split) or {}).get(lift) or {"round": [], "mean": [], "se": [], "n": []}

    for cell in cells:
        ref = references.get(_outside(cell))
        cell["reference"] = ref["key"] if ref else None
        if ref is None or ref is cell:
            cell["vs_reference"], cell["ahead_from"] = None, None
            continue
        cell["vs_reference"] = {
            split: {k: cc.paired_difference(cell["by_seed"][split][k], ref["by_seed"][split][k]) for k in DIFFERENCE_STATS}
            for split in EVAL_SPLITS
        }
        cell["ahead_from"] = {
            split: cc.ahead_from(lift_curve(cell, split), lift_curve(ref, split), higher_is_better=direction > 0)
            for split in EVAL_SPLITS
        }
    for cell in cells:
        del cell["by_seed"]
    keys = {c["reference"] for c in cells if c["reference"]}
    return keys.pop() if len(keys) == 1 else None


def _mark_chosen(store: ResultsStore, cells: list[dict[str, Any]], infos: Sequence[RunInfo]) -> None:
    """Mark, per family of cells (``term``, ``term loss_reduction=sum`` ...) and experiment, the cell the
    scenario's selection rule chooses on the validation split, as ``term-fl sweep`` does: its objective,
    average and max_mean_drop, on each run's last ``tail`` evaluated rounds."""
    selection = next((i.config.get("selection") for i in infos if i.config.get("selection")), None) or {}
    objective, average = selection.get("objective", "worst_10"), selection.get("average", "mean")
    tail = int(selection.get("tail") or 1)
    groups: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
    for cell in cells:
        cell["chosen"] = None
        groups.setdefault(_outside(cell), []).append(cell)
    for group in groups.values():
        rows = [_selection_row(c) for c in group]
        if any(r is None for r in rows):
            continue
        if tail > 1:
            for row, cell in zip(rows, group, strict=True):
                row.update(_tail_means(store, cell, tail, [objective, average]))
        chosen = select_by_validation(rows, objective=objective, average=average,
                                      max_mean_drop=selection.get("max_mean_drop", 0.01),
                                      split="validation_tail" if tail > 1 else "validation")  # fmt: skip
        for name, choice in chosen.items():
            candidates = [r for r in rows if r["strategy"] != REFERENCE_STRATEGY and family(r) == name]
            if len(candidates) > 1:  # a choice among several values
                cell = next(c for c in group if c["key"] == choice["config_hash"])
                cell["chosen"] = f"chosen on validation: {choice['rule']}" + (
                    " (the scenario chooses on its clean devices; this is all devices)"
                    if selection.get("devices") == "clean" else ""
                )  # fmt: skip


def _tail_means(store: ResultsStore, cell: Mapping[str, Any], tail: int, keys: Sequence[str]) -> dict[str, float]:
    """``validation_tail.KEY``: the mean over the cell's seeds and their last ``tail`` evaluated validation
    rounds (the runs of a cell share their rounds: the mean of each run's tail mean), summed by SQLite."""
    keys = list(dict.fromkeys(keys))
    rounds = store.last_rounds(cell["run_ids"], VAL, tail)
    columns = store.round_stats_sums(cell["run_ids"], keys, rounds).get(VAL)
    out = {}
    for key in keys:
        n = sum(columns[key]["n"]) if columns else 0
        if n:
            out[f"{SUMMARY_NAMES[VAL]}_tail.{key}"] = sum(columns[key]["sum"]) / n
    return out


def _selection_row(cell: Mapping[str, Any]) -> dict[str, Any] | None:
    row: dict[str, Any] = {"strategy": cell["strategy"], "cell": cell["label"], "config_hash": cell["key"]}
    for split, name in SUMMARY_NAMES.items():  # comparison.select_by_validation's names
        for key, value in cell["stats"][split].items():
            row[f"{name}.{key}"] = value["mean"]
            row[f"{name}.{key}.se"] = value["se"]
    if row.get("validation.pooled_mean") is None or row.get("validation.worst_10") is None:
        return None
    return row


def _sweeps(cells: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Series of cells that differ only in a strategy's tuned parameter (e.g. TERM over t), 2 values or more."""
    groups: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
    for cell in cells:
        param = TUNED.get(cell["strategy"])
        if param is None or cell["params"].get(param) is None:
            continue
        rest = cc.settings_key(cell["settings"], skip=lambda key, tuned=f"strategy.{param}": key == tuned)
        groups.setdefault(rest, []).append(cell)
    sweeps = []
    for members in groups.values():
        param = TUNED[members[0]["strategy"]]
        if len({c["params"][param] for c in members}) < 2:
            continue
        members.sort(key=lambda c: c["params"][param])
        label = {s["name"]: s["label"] for s in STRATEGIES}.get(members[0]["strategy"], members[0]["strategy"])
        sweeps.append({
            "id": str(len(sweeps)), "strategy": members[0]["strategy"], "label": label, "param": param,
            "cells": [c["key"] for c in members], "reference": members[0].get("reference"),
        })  # fmt: skip
    return sweeps


def _notices(cells: list[dict[str, Any]], varying: list[str], runs: list[dict[str, Any]]) -> list[str]:
    """What a reader must know before trusting the numbers, in words."""
    notes = []
    if varying:
        values = {k: sorted({cc.format_value(c["settings"].get(k, "unset")) for c in cells}) for k in varying}
        described = "; ".join(f"{k}: {', '.join(v)}" for k, v in values.items())
        notes.append(
            f"The cells differ in settings besides the strategy ({described}). They are shown side by side, "
            "never pooled; each label names its value."
        )
    for cell in cells:
        for seed, ids in cell["repeats"].items():
            notes.append(
                f"{cell['label']}: seed {seed} ran {len(ids) + 1} times. A repeated seed is a repeat, not a new "
                f"sample: it counts once (run {next(r for r in cell['run_ids'] if r not in ids)}); "
                f"left out: {', '.join(ids)}."
            )
    single = [c["label"] for c in cells if c["n"] == 1]
    if single:
        notes.append(f"One seed only (no standard error): {', '.join(single)}.")
    unfinished = [r for r in runs if r["counted"] and r["status"] != "finished"]
    for run in unfinished:
        notes.append(
            f"Run {run['run_id']} ({run['cell']}, seed {run['seed']}) is {run['status']} at round "
            f"{run['rounds_completed']} of {run['rounds_planned']}: its numbers are those of its last recorded round."
        )
    return notes


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
    """Per cell: identity, seeds, and per split every statistic's mean, standard error and n, and the
    paired differences against the reference cell."""
    stats = [s["key"] for s in data["statistics"]]
    diffs = data["difference_columns"]
    header = ["cell", "strategy", *PARAM_KEYS, "n_seeds", "seeds", "repeated_seeds", "rounds", "chosen", "config_hash",
              "run_ids"]  # fmt: skip
    for split in SPLIT_LABELS:
        header += [f"{split}.{k}.{m}" for k in stats for m in ("mean", "se", "n")]
        header += [f"{split}.{k}.minus_reference.{m}" for k in diffs for m in ("mean", "se", "n")]
        header.append(f"{split}.{data['lift_stat']}.ahead_of_reference_from_round")
    rows = []
    for c in data["cells"]:
        row = [c["label"], c["strategy"], *(c["params"].get(k) for k in PARAM_KEYS), c["n"],
               " ".join(map(str, c["seeds"])), " ".join(c["repeats"]), c["rounds"], int(bool(c["chosen"])), c["key"],
               " ".join(c["run_ids"])]  # fmt: skip
        for split in SPLIT_LABELS:
            row += [c["stats"][split][k][m] for k in stats for m in ("mean", "se", "n")]
            vs = (c.get("vs_reference") or {}).get(split) or {}
            row += [(vs.get(k) or {}).get(m) for k in diffs for m in ("mean", "se", "n")]
            row.append((c.get("ahead_from") or {}).get(split))
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
