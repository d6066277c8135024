"""What the dashboard shows, read from a results store as plain JSON values.

Every function takes an open :class:`~term_fl.results.ResultsStore` and returns
dicts and lists of str, int, float, bool and None, with NaN and ±inf turned
into None: the JSON API returns them as they are and the static report inlines
them, so the web pages and the report draw the same numbers.

Splits are named as in the store: ``test`` and ``val``. A run's *final*
statistics are those of its last round with statistics (the run may still be
running). A comparison groups runs by ``config_hash`` (a *cell*: the same
resolved settings, different seeds) and reports each statistic's mean and
standard error over seeds (sample standard deviation / sqrt(n)).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from term_fl.comparison import mean_and_stderr
from term_fl.fairness import STATISTICS
from term_fl.jsonable import plain
from term_fl.keys import EVAL_SPLITS
from term_fl.results import ResultsStore, RunInfo
from term_fl.strategies.registry import PARAM_KEYS, cell_label, strategy_order

__all__ = [
    "BadQuery",
    "NotFound",
    "compare",
    "device_name",
    "device_rounds",
    "devices_at",
    "list_runs",
    "round_series",
    "run_detail",
    "run_row",
    "weights_matrix",
]



class NotFound(LookupError):
    """Something asked for is not in the store (a round, a scenario's runs); the message says what."""


class BadQuery(ValueError):
    """A question the dashboard cannot answer as asked (e.g. a comparison of nothing)."""


def device_name(partition_id: int) -> str:
    """How a device is labelled in tables and charts: ``device 7``."""
    return f"device {int(partition_id)}"


# -- runs ---------------------------------------------------------------------


def _final_stats(store: ResultsStore, run_id: str) -> dict[str, Any]:
    """Per split: the last round's statistics with its ``round`` (empty before any round)."""
    final: dict[str, Any] = {}
    for split in EVAL_SPLITS:
        rounds = store.load_round_stats(run_id, split)
        final[split] = plain(rounds[-1]) if rounds else {}
    return final


def run_row(store: ResultsStore, info: RunInfo) -> dict[str, Any]:
    """One line of the runs list: identity, strategy parameters, progress and final statistics.

    ``damaged`` names the stored JSON that could not be read (the row is
    still listed, flagged, so one bad row does not hide the others).
    """
    damaged = list(info.damaged)
    try:
        final = _final_stats(store, info.run_id)
    except (ValueError, RecursionError):  # a round_stats row with damaged JSON
        final, damaged = {split: {} for split in EVAL_SPLITS}, [*damaged, "stats_json"]
    return plain(
        {
            "run_id": info.run_id,
            "name": info.name,
            "scenario": info.scenario,
            "engine": info.engine,
            "strategy": info.strategy,
            "params": {k: info.strategy_params[k] for k in PARAM_KEYS if k in info.strategy_params},
            "seed": info.seed,
            "config_hash": info.config_hash,
            "status": info.status,
            "rounds_completed": info.rounds_completed,
            "rounds_planned": info.rounds_planned,
            "started_at": info.started_at,
            "finished_at": info.finished_at,
            "final": final,
            "damaged": damaged,
        }
    )


def list_runs(
    store: ResultsStore, scenario: str | None = None, status: str | None = None, strategy: str | None = None
) -> list[dict[str, Any]]:
    """The runs matching every given filter, newest first."""
    infos = store.list_runs(scenario=scenario, status=status)
    return [run_row(store, info) for info in infos if strategy is None or info.strategy == strategy]


def run_detail(store: ResultsStore, run_id: str) -> dict[str, Any]:
    """A run's list line plus its full settings, data, error, summary and per-round bookkeeping."""
    info = store.get_run(run_id)
    row = run_row(store, info)
    try:
        rounds = store.load_rounds(run_id)
    except (ValueError, RecursionError):  # damaged excluded_json
        rounds, row["damaged"] = [], [*row["damaged"], "excluded_json"]
    return {
        **row,
        **plain(
            {
                "strategy_params": info.strategy_params,
                "config": info.config,
                "data": info.data,
                "error": info.error,
                "run_dir": info.run_dir,
                "summary": info.summary,
                "rounds": rounds,
            }
        ),
    }


# -- one run ------------------------------------------------------------------


def round_series(store: ResultsStore, run_id: str) -> dict[str, Any]:
    """Per split, one column per statistic over the rounds (``round`` first), None where missing."""
    splits: dict[str, dict[str, list[Any]]] = {}
    for split in EVAL_SPLITS:
        rows = store.load_round_stats(run_id, split)
        keys = ["round"] + sorted({k for row in rows for k in row} - {"round"})
        splits[split] = {k: [row.get(k) for row in rows] for k in keys}
    return plain({"run_id": run_id, "splits": splits})


def device_rounds(store: ResultsStore, run_id: str, split: str = "test") -> dict[int, list[dict[str, Any]]]:
    """Round -> the devices evaluated that round (partition_id order) with their name, accuracy, loss, counts."""
    metrics = store.load_metrics(run_id, split)
    by_round: dict[int, list[dict[str, Any]]] = {}
    columns = {key: metrics[key].tolist() for key in ("partition_id", "accuracy", "loss", "correct", "examples")}
    for i, r in enumerate(metrics["round"].tolist()):
        device = {key: values[i] for key, values in columns.items()}
        by_round.setdefault(r, []).append(plain({**device, "name": device_name(device["partition_id"])}))
    return by_round


def devices_at(store: ResultsStore, run_id: str, round: int | None = None, split: str = "test") -> dict[str, Any]:
    """The devices of one round (default: the last evaluated round), and which rounds have evaluations."""
    by_round = device_rounds(store, run_id, split)
    rounds = sorted(by_round)
    if round is None:
        if not rounds:
            return {"run_id": run_id, "split": split, "round": None, "rounds": [], "devices": []}
        round = rounds[-1]
    if round not in by_round:
        have = f"rounds {rounds[0]} to {rounds[-1]}" if rounds else "no evaluated rounds yet"
        raise NotFound(f"run {run_id!r} has no {split} evaluation for round {round} ({have})")
    return {"run_id": run_id, "split": split, "round": round, "rounds": rounds, "devices": by_round[round]}


def weights_matrix(store: ResultsStore, run_id: str) -> dict[str, Any]:
    """The tilted (aggregation) weight of every device in every round, for a heatmap.

    ``weights[i][j]`` belongs to device ``partition_ids[i]`` in round
    ``rounds[j]``; None where the device was not sampled or its reply was
    not aggregated.
    """
    rounds, partitions, matrix = store.device_matrix(run_id, "tilted_weight")
    return plain(
        {
            "run_id": run_id,
            "rounds": rounds,
            "partition_ids": partitions,
            "devices": [device_name(p) for p in partitions],
            "weights": matrix.T,
        }
    )


# -- several runs -------------------------------------------------------------


def _final_accuracies(store: ResultsStore, run_id: str, split: str) -> list[float]:
    """The device accuracies of the run's last evaluated round."""
    by_round = device_rounds(store, run_id, split)
    if not by_round:
        return []
    return [d["accuracy"] for d in by_round[max(by_round)] if d["accuracy"] is not None]


def _cell_order(cell: Mapping[str, Any]) -> tuple[Any, ...]:
    strategy = cell["strategy"]
    return (strategy_order(strategy), strategy, *(cell["params"].get(k) is None for k in PARAM_KEYS),
            *(cell["params"].get(k) or 0 for k in PARAM_KEYS), cell["config_hash"])  # fmt: skip


def compare(store: ResultsStore, run_ids: Sequence[str] | None = None, scenario: str | None = None) -> dict[str, Any]:
    """Cells (runs grouped by config_hash) with mean ± standard error of the final statistics over seeds,
    and each cell's pooled final device accuracies (all its seeds) for overlaid histograms.

    Give ``run_ids`` (any status) or ``scenario`` (its finished runs).
    """
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
    rows = [run_row(store, info) for info in infos]
    groups: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        groups.setdefault(row["config_hash"], []).append(row)
    cells = []
    for config_hash, members in groups.items():
        first = members[0]
        cell: dict[str, Any] = {
            "config_hash": config_hash,
            "label": cell_label({"name": first["strategy"], **first["params"]}),
            "strategy": first["strategy"],
            "params": first["params"],
            "scenarios": sorted({m["scenario"] for m in members}),
            "n": len(members),
            "seeds": sorted(m["seed"] for m in members),
            "run_ids": [m["run_id"] for m in members],
            "running": sum(m["status"] == "running" for m in members),
            "stats": {},
            "accuracies": {},
        }
        for split in EVAL_SPLITS:
            cell["stats"][split] = {}
            for stat in (s.key for s in STATISTICS):
                values = [m["final"][split].get(stat) for m in members]
                mean, se = mean_and_stderr(values)
                cell["stats"][split][stat] = {"mean": mean, "se": se, "n": sum(v is not None for v in values)}
            cell["accuracies"][split] = [a for m in members for a in _final_accuracies(store, m["run_id"], split)]
        cells.append(cell)
    cells.sort(key=_cell_order)
    labels = [c["label"] for c in cells]
    for c in cells:
        if labels.count(c["label"]) > 1:  # same strategy parameters, other settings differ
            c["label"] += f" #{c['config_hash'][:6]}"
    return plain({"title": title, "scenario": scenario, "runs": rows, "cells": cells})
