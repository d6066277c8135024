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

import csv
import io
import math
import time
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime, timezone
from typing import Any

import numpy as np

from term_fl.maths.fairness import STATISTICS, flagged, statistics_table
from term_fl.common.csvcells import csv_cell, csv_row
from term_fl.common.jsonable import plain
from term_fl.common.keys import EVAL_SPLITS, SUMMARY_NAMES
from term_fl.results import DAMAGED, ResultsStore, RunInfo, schema
from term_fl.strategies.registry import PARAM_KEYS
from term_fl.strategies.registry import STRATEGIES as REGISTRY

__all__ = [
    "BadQuery",
    "NotFound",
    "device_histories",
    "device_history",
    "device_name",
    "device_rounds",
    "device_rows_csv",
    "devices_at",
    "list_runs",
    "round_series",
    "rounds_csv",
    "run_detail",
    "run_row",
    "runs_csv",
    "statistics",
    "weights_matrix",
]

SPLIT_LABELS = {"test": "test", "val": SUMMARY_NAMES["val"]}  # the order the pages offer them
STRATEGIES = [{"name": spec.name, "label": spec.label} for spec in REGISTRY.values()]  # registry order
TUNED = {spec.name: spec.tuned[0] for spec in REGISTRY.values() if spec.tuned}  # what a sweep of it varies
# The comparison's views, by statistic key, from the flags of term_fl.maths.fairness.STATISTICS (labels,
# directions and groups come from there too): no list of statistics is kept here.
HEADLINE = flagged("headline")  # the cells table and the runs list
PRIMARY = flagged("primary")  # the paired differences and their marks, the per-round curves
LIFT = flagged("lift")[0]  # "ahead from round"
TRADEOFF = {"x": flagged("tradeoff", "x")[0], "y": list(flagged("tradeoff", "y")),
            "sweep_stats": [*flagged("tradeoff", "x"), *flagged("tradeoff", "y")]}  # fmt: skip
CURVE_PANELS = [
    *({"key": key} for key in PRIMARY),
    {"key": "risk", "choices": list(flagged("group", "risk")), "note": "loss risk over devices"},
]


def statistics() -> list[dict[str, Any]]:
    """Every statistic (key, label, group, direction, headline, description ...), as term_fl.maths.fairness lists them."""
    return statistics_table()


MAX_ID = 2**63 - 1
"""The largest device id or round the store can hold (SQLite's integers are 64-bit)."""


class NotFound(LookupError):
    """Something asked for is not in the store (a round, a scenario's runs); the message says what."""


class BadQuery(ValueError):
    """A question the dashboard cannot answer as asked (e.g. a comparison of nothing)."""


def device_name(partition_id: int) -> str:
    """How a device is labelled in tables and charts: ``device 7``."""
    return f"device {int(partition_id)}"


# -- runs ---------------------------------------------------------------------


def run_row(info: RunInfo, final: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """One line of the runs list: identity, strategy parameters, progress and final statistics.

    ``final`` is the run's entry of :meth:`ResultsStore.final_stats` (split ->
    last round's statistics). ``damaged`` names the stored JSON that could not
    be read (the row is still listed, flagged, so one bad row does not hide the others).
    """
    damaged = list(info.damaged)
    final = {split: dict(final.get(split) or {}) for split in EVAL_SPLITS}
    for stats in final.values():
        if stats.pop(DAMAGED, None) and "stats_json" not in damaged:
            damaged.append("stats_json")
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
    store: ResultsStore,
    scenario: str | None = None,
    status: str | None = None,
    strategy: str | None = None,
    *,
    text: str | None = None,
    limit: int | None = None,
    offset: int = 0,
) -> list[dict[str, Any]]:
    """The runs matching every given filter, newest first (``limit`` of them from ``offset``; None: all)."""
    infos = store.list_runs(scenario=scenario, status=status, strategy=strategy, text=text, limit=limit,
                            offset=offset)  # fmt: skip
    final = store.final_stats(info.run_id for info in infos)
    return [run_row(info, final.get(info.run_id, {})) for info in infos]


def lost_note(info: RunInfo) -> str | None:
    """For a lost run, what the dashboard knows: when its writer was last heard of, and the limit."""
    if info.status != "lost":
        return None
    last = info.heartbeat_at if info.heartbeat_at is not None else info.started_at
    seen = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(last))
    return (
        f"Lost: the process writing this run has not been heard of since {seen} (a running run sends a "
        f"heartbeat every {schema.HEARTBEAT_S:g} s and is called lost after {schema.LOST_AFTER_S:g} s of silence). It was "
        f"killed, crashed or its machine stopped; the {info.rounds_completed} rounds it recorded are kept."
    )


def run_detail(store: ResultsStore, run_id: str) -> dict[str, Any]:
    """A run's list line plus its full settings, data, error, summary and per-round bookkeeping."""
    info = store.get_run(run_id)
    row = run_row(info, store.final_stats([run_id]).get(run_id, {}))
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
                "status_note": lost_note(info),
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
    rounds = store.evaluated_rounds(run_id, split)
    if round is None:
        if not rounds:
            return {"run_id": run_id, "split": split, "round": None, "rounds": [], "devices": []}
        round = rounds[-1]
    if round not in rounds:
        have = _evaluated_rounds(rounds)
        raise NotFound(f"run {run_id!r} has no {split} evaluation for round {round} ({have})")
    metrics = store.load_round_devices(run_id, round, split)
    return {"run_id": run_id, "split": split, "round": round, "rounds": rounds, "devices": _device_list(metrics)}


def _device_list(metrics: Mapping[str, np.ndarray]) -> list[dict[str, Any]]:
    columns = {key: metrics[key].tolist() for key in ("partition_id", "accuracy", "loss", "correct", "examples")}
    return [
        plain({**{key: values[i] for key, values in columns.items()}, "name": device_name(columns["partition_id"][i])})
        for i in range(len(columns["partition_id"]))
    ]


def _evaluated_rounds(rounds: Sequence[int]) -> str:
    """'evaluated rounds 10, 20, ... 100' (a run may evaluate every N rounds: run.evaluate_every)."""
    if not rounds:
        return "no evaluated rounds yet"
    shown = ", ".join(map(str, rounds[:5])) + (f", ... {rounds[-1]}" if len(rounds) > 5 else "")
    return f"evaluated rounds: {shown}"


def weights_matrix(store: ResultsStore, run_id: str) -> dict[str, Any]:
    """The tilted (aggregation) weight of every device in every round, for a heatmap.

    ``weights[i][j]`` belongs to device ``partition_ids[i]`` in round
    ``rounds[j]``; None where the device was not sampled or its reply was
    not aggregated. ``examples[i]`` is the device's number of training
    samples (as it reported them) and ``loss[i]`` its test loss in the last
    evaluated round, for sorting the rows.
    """
    rounds, partitions, matrix = store.device_matrix(run_id, "tilted_weight")
    _, _, sizes = store.device_matrix(run_id, "num_examples")
    last = store.evaluated_rounds(run_id, "test")
    final = store.load_round_devices(run_id, last[-1], "test") if last else None
    loss = dict(zip(final["partition_id"].tolist(), final["loss"].tolist(), strict=True)) if final else {}
    with np.errstate(all="ignore"):
        examples = np.nanmax(sizes, axis=0) if sizes.size else np.full(len(partitions), np.nan)
    return plain(
        {
            "run_id": run_id,
            "rounds": rounds,
            "partition_ids": partitions,
            "devices": [device_name(p) for p in partitions],
            "weights": matrix.T,
            "examples": examples,
            "loss": [loss.get(int(p)) for p in partitions],
            "loss_round": last[-1] if last else None,
        }
    )


def device_history(store: ResultsStore, run_id: str, partition_id: int) -> dict[str, Any]:
    """One device over the rounds: accuracy, loss and samples per split, and its training rows
    (sampled, F_k, loss after training, tilted weight, training samples)."""
    if not 0 <= partition_id <= MAX_ID:  # beyond SQLite's 64-bit integers: no such device
        raise NotFound(f"run {run_id!r} has no device {partition_id}")
    history = store.load_device_history(run_id, partition_id)
    if not any(len(columns["round"]) for columns in (*history["eval"].values(), history["train"])):
        raise NotFound(f"run {run_id!r} has no rows of device {partition_id}")
    return _history(run_id, int(partition_id), history["eval"], history["train"])


def device_histories(store: ResultsStore, run_id: str) -> dict[str, dict[str, Any]]:
    """:func:`device_history` of every device of the run (partition id as text -> history), read at once."""
    evals = {split: store.load_metrics(run_id, split) for split in EVAL_SPLITS}
    train = store.load_train(run_id)
    pids = sorted({*train["partition_id"].tolist(), *(p for m in evals.values() for p in m["partition_id"].tolist())})

    def rows_of(columns: Mapping[str, np.ndarray], pid: int) -> dict[str, np.ndarray]:
        mask = columns["partition_id"] == pid
        return {k: v[mask] for k, v in columns.items()}

    return {
        str(pid): _history(run_id, pid, {s: rows_of(m, pid) for s, m in evals.items()}, rows_of(train, pid))
        for pid in pids
    }


def _history(run_id: str, pid: int, evals: Mapping[str, Mapping[str, Any]], train: Mapping[str, Any]) -> dict[str, Any]:
    return plain(
        {
            "run_id": run_id,
            "partition_id": pid,
            "name": device_name(pid),
            "eval": {split: {k: v for k, v in cols.items() if k != "partition_id"} for split, cols in evals.items()},
            "train": {k: v for k, v in train.items() if k != "partition_id"},
        }
    )


# -- CSV ------------------------------------------------------------------------


def to_csv(header: Sequence[str], rows: Iterable[Sequence[Any]], *, finite: bool = False) -> str:
    """CSV text (RFC 4180, ``\\r\\n`` line ends) of ``rows``; None, NaN and ±inf are empty fields, and text that
    a spreadsheet would run as a formula is escaped (:func:`term_fl.common.csvcells.csv_cell`).

    ``finite=True`` says the rows hold no NaN or ±inf already (plain JSON values): only text is looked at.
    """
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(header)
    if finite:
        writer.writerows(csv_row(row) for row in rows)  # the csv module writes None as an empty field
    else:
        writer.writerows(["" if v is None or (isinstance(v, float) and not math.isfinite(v)) else csv_cell(v)
                          for v in row] for row in rows)  # fmt: skip
    return out.getvalue()


RUN_CSV_FIELDS = ("run_id", "name", "scenario", "engine", "strategy", "seed", "status", "rounds_completed",
                  "rounds_planned", "started_at", "finished_at", "config_hash")  # fmt: skip


def runs_csv(rows: Sequence[Mapping[str, Any]], extra: Sequence[str] = ()) -> str:
    """The runs list as CSV: identity, strategy parameters, progress and every final statistic per split
    (``extra``: further fields of the rows, e.g. a comparison's ``cell`` and ``counted``)."""
    stats = [s["key"] for s in statistics()]
    fields = [*RUN_CSV_FIELDS, *extra]
    header = [*fields, "duration_s", *PARAM_KEYS,
              *(f"{split}.{k}" for split in SPLIT_LABELS for k in ("round", *stats))]  # fmt: skip
    times = ("started_at", "finished_at")
    return to_csv(header, (
        [*(iso_time(row[f]) if f in times else row[f] for f in fields), duration(row),
         *(row["params"].get(k) for k in PARAM_KEYS),
         *(row["final"][split].get(k) for split in SPLIT_LABELS for k in ("round", *stats))]
        for row in rows
    ))  # fmt: skip


def iso_time(stamp: float | None) -> str | None:
    """Unix seconds as ISO 8601 UTC to the second (``2026-11-26T22:46:13Z``), what a spreadsheet reads as a time."""
    if stamp is None:
        return None
    return datetime.fromtimestamp(stamp, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def duration(run: Mapping[str, Any]) -> float | None:
    """A run's wall time in seconds, from its start to its end (None while it runs or when it has no end)."""
    start, end = run.get("started_at"), run.get("finished_at")
    return None if start is None or end is None else round(end - start, 1)


def rounds_csv(series: Mapping[str, Any]) -> str:
    """A run's per-round statistics (:func:`round_series`) as CSV: one row per round and split."""
    keys = sorted({k for columns in series["splits"].values() for k in columns} - {"round"})
    rows = []
    for split, columns in series["splits"].items():
        for i, r in enumerate(columns.get("round", [])):
            rows.append([r, split, *((columns.get(k) or [None] * (i + 1))[i] for k in keys)])
    rows.sort(key=lambda row: (row[0], row[1]))
    return to_csv(["round", "split", *keys], rows)


DEVICE_CSV_TRAIN = ("sampled", "included", "train_loss", "train_loss_after", "tilted_weight", "num_examples")
DEVICE_CSV_EVAL = ("loss", "accuracy", "correct", "examples")


def device_rows_csv(store: ResultsStore, run_id: str) -> str:
    """Every device in every round of a run as CSV: its training row and its evaluation per split.

    One row per (round, partition_id) that has a training or an evaluation
    row; empty fields where it has none (not sampled, or not evaluated that round).
    """
    train = store.load_train(run_id)
    evals = {split: store.load_metrics(run_id, split) for split in EVAL_SPLITS}
    rows: dict[tuple[int, int], dict[str, Any]] = {}
    for i, key in enumerate(zip(train["round"].tolist(), train["partition_id"].tolist(), strict=True)):
        rows.setdefault(key, {}).update({c: train[c][i].item() for c in DEVICE_CSV_TRAIN})
    for split, metrics in evals.items():
        for i, key in enumerate(zip(metrics["round"].tolist(), metrics["partition_id"].tolist(), strict=True)):
            rows.setdefault(key, {}).update({f"{split}_{c}": metrics[c][i].item() for c in DEVICE_CSV_EVAL})
    header = ["round", "partition_id", *DEVICE_CSV_TRAIN, *(f"{s}_{c}" for s in EVAL_SPLITS for c in DEVICE_CSV_EVAL)]
    return to_csv(header, ([*key, *(rows[key].get(c) for c in header[2:])] for key in sorted(rows)))
