"""The numbers of the comparison page: each cell's statistics, its paired differences, its lead and its choice.

The statistics, the paired differences against every baseline cell, their
tests and marks are :func:`term_fl.comparison.table.compare_cells`' answer,
the one the sweep's console table and ``comparison.csv`` / ``.json`` show;
this module reads the values it needs from the store and adds what only the
dashboard draws: the round from which a cell's lift statistic stays ahead of
each baseline's (:func:`term_fl.comparison.cells.ahead_from`), the cell
chosen on validation (the scenario's ``[selection]`` rule, as ``term-fl
sweep`` applies it), the series of a swept parameter and the notices.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from term_fl.comparison import cells as cc
from term_fl.comparison.pairing import BASELINES, pairing_key
from term_fl.comparison.summaries import family, select_by_validation
from term_fl.comparison.table import CellValues, compare_cells
from term_fl.common.keys import EVAL_SPLITS, SUMMARY_NAMES, VAL
from term_fl.dashboard.queries import LIFT, STRATEGIES, TUNED, statistics
from term_fl.results import ResultsStore, RunInfo

__all__ = ["add_comparison", "experiment", "mark_chosen", "notices", "round_curves", "sweeps"]

_NO_CURVE = {"round": [], "mean": [], "se": [], "n": []}


def experiment(cell: Mapping[str, Any]) -> tuple[Any, ...]:
    """The settings a cell shares with the cells it is compared with (:func:`term_fl.comparison.pairing.pairing_key`)."""
    return pairing_key(cell["settings"])


def round_curves(store: ResultsStore, run_ids: Sequence[str], keys: Sequence[str],
                 rounds: Sequence[int] | None = None) -> dict[str, dict[str, dict[str, list[Any]]]]:  # fmt: skip
    """Per split and statistic, the per-round mean ± standard error over the runs (summed by SQLite)."""
    sums = store.round_stats_sums(run_ids, keys, rounds)
    return {
        split: {k: cc.curve(columns["round"], columns[k]["n"], columns[k]["sum"], columns[k]["sumsq"]) for k in keys}
        for split, columns in sums.items()
    }


def add_comparison(store: ResultsStore, cells: list[dict[str, Any]], rows: Mapping[str, dict[str, Any]],
                   lift_curves: dict[str, dict[str, dict[str, Any]]]) -> None:  # fmt: skip
    """Give each cell ``stats``, ``baselines``, ``differences`` and ``ahead`` (and the fields of 0.2:
    ``reference``, ``vs_reference``, ``ahead_from``, against FedAvg).

    ``rows`` are the runs' list lines (their ``final`` statistics);
    ``lift_curves`` the lift statistic's per-round curves of the cells
    already read (the others are read here).
    """
    keys = [s["key"] for s in statistics()]
    values = []
    for cell in cells:
        members = [rows[r] for r in cell["run_ids"]]
        finals = {split: [(m["seed"], m["final"].get(split) or {}) for m in members] for split in EVAL_SPLITS}
        values.append(CellValues(cell["key"], cell["strategy"], cell["settings"], {
            split: {k: {seed: f.get(k) for seed, f in finals[split]} for k in keys} for split in EVAL_SPLITS}))
        cell["_rounds"] = {split: cc.mean_se(f.get("round") for _, f in finals[split]) for split in EVAL_SPLITS}
    compared = compare_cells(values, EVAL_SPLITS)
    by_key = {c["key"]: c for c in cells}
    direction = next(s["direction"] for s in statistics() if s["key"] == LIFT)
    first = BASELINES[0]
    for cell in cells:
        result = compared[cell["key"]]
        rounds = cell.pop("_rounds")
        cell["stats"] = {split: {**result["stats"][split], "round": rounds[split]} for split in EVAL_SPLITS}
        cell["baselines"], cell["differences"] = result["baselines"], result["differences"]
        cell["ahead"] = {
            baseline: {split: _ahead(store, cell, by_key[key], split, lift_curves, direction) for split in EVAL_SPLITS}
            for baseline, key in cell["baselines"].items()
        }  # fmt: skip
        cell["reference"] = cell["key"] if cell["strategy"] == first and not cell["baselines"] else (
            cell["baselines"].get(first))  # fmt: skip
        cell["vs_reference"] = cell["differences"].get(first)
        cell["ahead_from"] = {s: a["round"] for s, a in cell["ahead"][first].items()} if first in cell["ahead"] else None


def _ahead(store: ResultsStore, cell: Mapping[str, Any], reference: Mapping[str, Any], split: str,
           lift_curves: dict[str, dict[str, dict[str, Any]]], direction: int) -> dict[str, Any]:  # fmt: skip
    """From which round the cell's mean lift curve stays ahead of the reference's: ``round`` (None: not ahead
    in the last round both have) and ``rounds_compared`` (0: nothing to compare, no answer)."""
    curves = []
    for c in (cell, reference):
        if c["key"] not in lift_curves:
            lift_curves[c["key"]] = round_curves(store, c["run_ids"], [LIFT])
        curves.append((lift_curves[c["key"]].get(split) or {}).get(LIFT) or _NO_CURVE)
    mine, theirs = curves
    common = {r for r, m in zip(theirs["round"], theirs["mean"], strict=True) if m is not None} & {
        r for r, m in zip(mine["round"], mine["mean"], strict=True) if m is not None}
    return {"round": cc.ahead_from(mine, theirs, higher_is_better=direction > 0), "rounds_compared": len(common)}


def mark_chosen(store: ResultsStore, cells: list[dict[str, Any]], infos: Sequence[RunInfo]) -> None:
    """Mark, per family of cells (``term``, ``term loss_reduction=sum`` ...) and experiment, the cell the
    scenario's selection rule chooses on the validation split, as ``term-fl sweep`` does: its objective,
    average and max_mean_drop, on each run's last ``tail`` evaluated rounds."""
    selection = next((i.config.get("selection") for i in infos if i.config.get("selection")), None) or {}
    objective, average = selection.get("objective", "worst_10"), selection.get("average", "mean")
    tail = int(selection.get("tail") or 1)
    groups: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
    for cell in cells:
        cell["chosen"] = None
        groups.setdefault(experiment(cell), []).append(cell)
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
            candidates = [r for r in rows if r["strategy"] not in BASELINES and family(r) == name]
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


def sweeps(cells: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Series of cells that differ only in a strategy's tuned parameter (e.g. TERM over t), 2 values or more,
    with the baseline cells of their settings (``references``; ``reference``: FedAvg's, as in 0.2)."""
    groups: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
    for cell in cells:
        param = TUNED.get(cell["strategy"])
        if param is None or cell["params"].get(param) is None:
            continue
        rest = cc.settings_key(cell["settings"], skip=lambda key, tuned=f"strategy.{param}": key == tuned)
        groups.setdefault(rest, []).append(cell)
    out = []
    for members in groups.values():
        param = TUNED[members[0]["strategy"]]
        if len({c["params"][param] for c in members}) < 2:
            continue
        members.sort(key=lambda c: c["params"][param])
        label = {s["name"]: s["label"] for s in STRATEGIES}.get(members[0]["strategy"], members[0]["strategy"])
        references = list(members[0]["baselines"].values())
        out.append({
            "id": str(len(out)), "strategy": members[0]["strategy"], "label": label, "param": param,
            "cells": [c["key"] for c in members], "references": references,
            "reference": members[0]["baselines"].get(BASELINES[0]),
        })  # fmt: skip
    return out


def notices(cells: list[dict[str, Any]], varying: list[str], runs: list[dict[str, Any]]) -> list[str]:
    """What a reader must know before trusting the numbers, in words."""
    notes = []
    if varying:
        values = {k: sorted({cc.format_value(c["settings"].get(k, "unset")) for c in cells}) for k in varying}
        described = "; ".join(f"{k}: {', '.join(v)}" for k, v in values.items())
        notes.append(
            f"The cells differ in settings besides the strategy ({described}). They are shown side by side, "
            "never pooled; each label names its value, and each cell is paired only with the baselines of its own "
            "settings."
        )
    paired_with = {key for c in cells for key in c["baselines"].values()}
    alone = [c["label"] for c in cells if not c["baselines"] and c["key"] not in paired_with]
    if alone and len(cells) > 1:
        notes.append(f"No baseline cell of the same settings, so no paired differences: {', '.join(alone)}.")
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
    for run in (r for r in runs if r["counted"] and r["status"] != "finished"):
        notes.append(
            f"Run {run['run_id']} ({run['cell']}, seed {run['seed']}) is {run['status']} at round "
            f"{run['rounds_completed']} of {run['rounds_planned']}: its numbers are those of its last recorded round."
        )
    return notes
