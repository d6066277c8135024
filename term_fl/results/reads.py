"""Reading the store: runs (with their derived status), rounds, per-device rows, statistics."""

from __future__ import annotations

import json
import math
import sqlite3
import time
from collections.abc import Iterable, Iterator
from typing import Any

import numpy as np

from term_fl.common.keys import EVAL_SPLITS

from . import schema
from .rows import RunInfo, _as_int, _check_split, _columns, _convert, _nan_for_null, _nan_if_none, _run_info
from .schema import EVAL_COLUMNS, RUN_STATUSES, TRAIN_COLUMNS, _RUN_COLUMNS, stats_columns

DAMAGED = "_damaged"  # marks a row read back without its damaged JSON (final_stats)


class Reads:
    """The reading methods of :class:`~term_fl.results.ResultsStore`."""

    def _query(self, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        with self._lock:
            return self._conn.execute(sql, params).fetchall()

    def _require_run(self, run_id: str) -> None:
        if not self._query("SELECT 1 FROM runs WHERE run_id = ?", (run_id,)):
            raise self._not_found(run_id)

    def _columns_sql(self) -> str:
        return _RUN_COLUMNS.format(heartbeat="heartbeat_at" if self.version >= 2 else "NULL")

    def _last_sign_of_life(self) -> str:
        return "coalesce(heartbeat_at, started_at)" if self.version >= 2 else "started_at"

    def list_runs(
        self,
        scenario: str | None = None,
        status: str | None = None,
        config_hash: str | None = None,
        *,
        strategy: str | None = None,
        text: str | None = None,
        limit: int | None = None,
        offset: int = 0,
    ) -> list[RunInfo]:
        """Runs matching every given filter, newest first.

        ``status`` may be ``lost`` (running, heartbeat older than
        LOST_AFTER_S); ``running`` then means running with a fresh heartbeat.
        ``text`` matches a part of the run id or the name (case-insensitive);
        ``limit`` and ``offset`` page through the result (None: all).
        """
        now = time.time()
        where, params = self._run_filters(scenario, status, config_hash, strategy, text, now)
        sql = f"SELECT {self._columns_sql()} FROM runs{where} ORDER BY started_at DESC, run_id DESC"
        if limit is not None:
            sql += " LIMIT ? OFFSET ?"
            params += (_convert(_as_int, limit, "limit"), _convert(_as_int, offset, "offset"))
        return [_run_info(row, now) for row in self._query(sql, params)]

    def count_runs(
        self,
        scenario: str | None = None,
        status: str | None = None,
        config_hash: str | None = None,
        *,
        strategy: str | None = None,
        text: str | None = None,
    ) -> int:
        """How many runs :meth:`list_runs` would return without a limit."""
        where, params = self._run_filters(scenario, status, config_hash, strategy, text, time.time())
        return self._query(f"SELECT count(*) FROM runs{where}", params)[0][0]

    def run_values(self, column: str) -> list[Any]:
        """The distinct values of ``scenario`` or ``strategy`` over every run, sorted."""
        if column not in ("scenario", "strategy"):
            raise ValueError(f"column must be scenario or strategy, got {column!r}")
        return [row[0] for row in self._query(f"SELECT DISTINCT {column} FROM runs ORDER BY {column}")]

    def _run_filters(
        self, scenario: str | None, status: str | None, config_hash: str | None, strategy: str | None,
        text: str | None, now: float,
    ) -> tuple[str, tuple[Any, ...]]:  # fmt: skip
        if status is not None and status not in RUN_STATUSES:
            raise ValueError(f"status must be one of {RUN_STATUSES}, got {status!r}")
        filters = {"scenario": scenario, "config_hash": config_hash, "strategy": strategy}
        where = [f"{column} = ?" for column, value in filters.items() if value is not None]
        params: tuple[Any, ...] = tuple(v for v in filters.values() if v is not None)
        if status in ("running", "lost"):
            where.append(f"status = 'running' AND {self._last_sign_of_life()} {'<' if status == 'lost' else '>='} ?")
            params += (now - schema.LOST_AFTER_S,)
        elif status is not None:
            where.append("status = ?")
            params += (status,)
        if text:
            pattern = "%" + text.lower().replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
            where.append("(lower(run_id) LIKE ? ESCAPE '\\' OR lower(name) LIKE ? ESCAPE '\\')")
            params += (pattern, pattern)
        return (" WHERE " + " AND ".join(where) if where else ""), params

    def has_run(self, run_id: str) -> bool:
        """Whether the store holds a run with this id."""
        return bool(self._query("SELECT 1 FROM runs WHERE run_id = ?", (run_id,)))

    def get_run(self, run_id: str) -> RunInfo:
        """The run with this id (:class:`RunNotFound` if none)."""
        rows = self._query(f"SELECT {self._columns_sql()} FROM runs WHERE run_id = ?", (run_id,))
        if not rows:
            raise self._not_found(run_id)
        return _run_info(rows[0], time.time())

    def load_metrics(self, run_id: str, split: str = "test") -> dict[str, np.ndarray]:
        """Per-device evaluation rows of one split, sorted by round and partition_id.

        Columns: round, partition_id, correct, examples (int64); loss,
        accuracy (float64, NaN where missing).
        """
        _check_split(split)
        self._require_run(run_id)
        rows = self._query(
            "SELECT round, partition_id, loss, accuracy, correct, examples FROM device_eval "
            "WHERE run_id = ? AND split = ? ORDER BY round, partition_id",
            (run_id, split),
        )
        return _columns(rows, {"round": np.int64, "partition_id": np.int64, "loss": np.float64,
                               "accuracy": np.float64, "correct": np.int64, "examples": np.int64})  # fmt: skip

    def load_train(self, run_id: str) -> dict[str, np.ndarray]:
        """Per-device training rows, sorted by round and partition_id.

        Columns: round, partition_id (int64); sampled, included (bool);
        train_loss, train_loss_after, tilted_weight, num_examples (float64,
        NaN where missing).
        """
        self._require_run(run_id)
        rows = self._query(
            f"SELECT round, partition_id, {', '.join(TRAIN_COLUMNS)} FROM device_train "
            "WHERE run_id = ? ORDER BY round, partition_id",
            (run_id,),
        )
        return _columns(rows, {"round": np.int64, "partition_id": np.int64, "sampled": bool, "included": bool,
                               "train_loss": np.float64, "train_loss_after": np.float64,
                               "tilted_weight": np.float64, "num_examples": np.float64})  # fmt: skip

    def load_round_stats(self, run_id: str, split: str = "test") -> list[dict[str, Any]]:
        """The statistics of every round of one split, in round order, each with its ``round``."""
        _check_split(split)
        self._require_run(run_id)
        rows = self._query(
            "SELECT round, stats_json FROM round_stats WHERE run_id = ? AND split = ? ORDER BY round",
            (run_id, split),
        )
        return [{"round": r, **_nan_for_null(json.loads(text))} for r, text in rows]

    def load_rounds(self, run_id: str) -> list[dict[str, Any]]:
        """One dict per recorded round: round, status, num_sampled, num_included, duration_s (NaN
        where missing), excluded (list of dicts) and diagnostics (the strategy's numbers, by name)."""
        self._require_run(run_id)
        # Before schema version 3 TERM's running estimate had a column of its own.
        diagnostics = "diagnostics_json" if self.version >= 3 else "running_estimate"
        rows = self._query(
            f"SELECT round, status, num_sampled, num_included, duration_s, excluded_json, {diagnostics} "
            "FROM rounds WHERE run_id = ? ORDER BY round",
            (run_id,),
        )
        return [
            {"round": r, "status": status, "num_sampled": sampled, "num_included": included,
             "duration_s": _nan_if_none(duration), "excluded": json.loads(excluded),
             "diagnostics": _diagnostics(value, self.version)}
            for r, status, sampled, included, duration, excluded, value in rows
        ]  # fmt: skip

    def final_stats(self, run_ids: Iterable[str]) -> dict[str, dict[str, dict[str, Any]]]:
        """Per run and split, the statistics of the last round that has them, with its ``round``.

        One indexed lookup per run and split: the cost does not grow with the
        number of rounds. A run without statistics of a split has no entry
        for it; unknown run ids are left out; a row whose JSON is damaged
        holds only ``round`` and :data:`DAMAGED`.
        """
        out: dict[str, dict[str, dict[str, Any]]] = {}
        ids = list(dict.fromkeys(run_ids))
        for split in EVAL_SPLITS:
            for chunk in _chunks(ids):
                rows = self._query(
                    "SELECT r.run_id, s.round, s.stats_json FROM runs r JOIN round_stats s "
                    "ON s.run_id = r.run_id AND s.split = ? AND s.round = (SELECT round FROM round_stats "
                    "WHERE run_id = r.run_id AND split = ? ORDER BY round DESC LIMIT 1) "
                    f"WHERE r.run_id IN ({', '.join('?' * len(chunk))})",
                    (split, split, *chunk),
                )
                for run_id, r, text in rows:
                    try:
                        out.setdefault(run_id, {})[split] = {"round": r, **_nan_for_null(json.loads(text))}
                    except (ValueError, RecursionError):  # damaged JSON: the round, flagged, without statistics
                        out.setdefault(run_id, {})[split] = {"round": r, DAMAGED: "stats_json"}
        return out

    def round_stats_sums(
        self, run_ids: Iterable[str], keys: Iterable[str], rounds: Iterable[int] | None = None
    ) -> dict[str, dict[str, Any]]:
        """Per split and round, over the given runs: for each statistic the count, sum and sum of squares
        of its finite values (the moments of a mean and a standard error over runs).

        SQLite aggregates (``GROUP BY split, round``), so the rows that come
        back are one per round and split, however many runs there are. A
        statistic with a column of its own in this store's version
        (:data:`~term_fl.results.schema.STATS_COLUMNS_SINCE`) is read from it, the
        others out of the stored JSON by ``json_extract``. Returns
        ``{split: {"round": [...], key: {"n": [...], "sum": [...], "sumsq": [...]}}}``.
        ``rounds``: only these rounds (read through the primary key: the
        cost follows the rounds asked for, not the runs' length).
        """
        keys = list(keys)
        for key in keys:
            if not key.replace("_", "").isalnum():
                raise ValueError(f"a statistic key is letters, digits and '_', got {key!r}")
        own = stats_columns(self.version)
        columns = [key if key in own else f"json_extract(stats_json, '$.{key}')" for key in keys]
        aggregates = ", ".join(f"count({c}), total({c}), total({c} * {c})" for c in columns)
        sums: dict[tuple[str, int], list[float]] = {}
        only = "" if rounds is None else " AND round IN (SELECT value FROM json_each(?))"
        extra = () if rounds is None else (json.dumps(sorted({int(r) for r in rounds})),)
        for chunk in _chunks(list(dict.fromkeys(run_ids))):
            where = f"WHERE run_id IN ({', '.join('?' * len(chunk))}){only}"
            try:
                rows = self._query(f"SELECT split, round, {aggregates} FROM round_stats {where} GROUP BY split, round",
                                   (*chunk, *extra))  # fmt: skip
            except sqlite3.OperationalError:  # a damaged stats_json: sum in Python, leaving that row out
                rows = _sums_in_python(self._query(f"SELECT split, round, stats_json FROM round_stats {where}",
                                                   (*chunk, *extra)), keys)  # fmt: skip
            for split, r, *values in rows:  # counts and sums add up across chunks
                acc = sums.setdefault((split, r), [0.0] * len(values))
                for i, v in enumerate(values):
                    acc[i] += v
        out: dict[str, dict[str, Any]] = {}
        for (split, r), values in sorted(sums.items()):
            entry = out.setdefault(split, {"round": [], **{k: {"n": [], "sum": [], "sumsq": []} for k in keys}})
            entry["round"].append(r)
            for i, key in enumerate(keys):
                entry[key]["n"].append(int(values[3 * i]))
                entry[key]["sum"].append(values[3 * i + 1])
                entry[key]["sumsq"].append(values[3 * i + 2])
        return out

    def stats_rounds(self, run_ids: Iterable[str]) -> list[int]:
        """The rounds in which any of the given runs has statistics (of either split), in order."""
        out: set[int] = set()
        for chunk in _chunks(list(dict.fromkeys(run_ids))):
            rows = self._query(f"SELECT DISTINCT round FROM round_stats WHERE run_id IN ({', '.join('?' * len(chunk))})",
                               tuple(chunk))  # fmt: skip
            out.update(r for (r,) in rows)
        return sorted(out)

    def last_rounds(self, run_ids: Iterable[str], split: str, count: int) -> list[int]:
        """The rounds among each run's last ``count`` rounds with statistics of ``split`` (read backwards
        through the primary key: the cost follows ``count``, not the runs' length), in order."""
        _check_split(split)
        out: set[int] = set()
        for run_id in dict.fromkeys(run_ids):
            rows = self._query("SELECT round FROM round_stats WHERE run_id = ? AND split = ? ORDER BY round DESC "
                               "LIMIT ?", (run_id, split, int(count)))  # fmt: skip
            out.update(r for (r,) in rows)
        return sorted(out)

    def evaluated_rounds(self, run_id: str, split: str = "test") -> list[int]:
        """The rounds of a run that have statistics (evaluations) of ``split``, in order."""
        _check_split(split)
        self._require_run(run_id)
        rows = self._query("SELECT round FROM round_stats WHERE run_id = ? AND split = ? ORDER BY round", (run_id, split))
        return [r for (r,) in rows]

    def load_round_devices(self, run_id: str, round: int, split: str = "test") -> dict[str, np.ndarray]:
        """The per-device evaluation rows of one round and split (columns as :meth:`load_metrics`)."""
        _check_split(split)
        rows = self._query(
            "SELECT round, partition_id, loss, accuracy, correct, examples FROM device_eval "
            "WHERE run_id = ? AND round = ? AND split = ? ORDER BY partition_id",
            (run_id, _convert(_as_int, round, "round"), split),
        )
        return _columns(rows, {"round": np.int64, "partition_id": np.int64, "loss": np.float64,
                               "accuracy": np.float64, "correct": np.int64, "examples": np.int64})  # fmt: skip

    def load_device_history(self, run_id: str, partition_id: int) -> dict[str, Any]:
        """Every recorded row of one device: its evaluations per split and its training rows, by round.

        Returns ``{"eval": {split: columns}, "train": columns}`` with the
        columns of :meth:`load_metrics` and :meth:`load_train`.
        """
        self._require_run(run_id)
        pid = _convert(_as_int, partition_id, "partition_id")
        evals = {}
        for split in EVAL_SPLITS:
            rows = self._query(
                "SELECT round, partition_id, loss, accuracy, correct, examples FROM device_eval "
                "WHERE run_id = ? AND split = ? AND partition_id = ? ORDER BY round",
                (run_id, split, pid),
            )
            evals[split] = _columns(rows, {"round": np.int64, "partition_id": np.int64, "loss": np.float64,
                                           "accuracy": np.float64, "correct": np.int64, "examples": np.int64})  # fmt: skip
        rows = self._query(
            f"SELECT round, partition_id, {', '.join(TRAIN_COLUMNS)} FROM device_train "
            "WHERE run_id = ? AND partition_id = ? ORDER BY round",
            (run_id, pid),
        )
        train = _columns(rows, {"round": np.int64, "partition_id": np.int64, "sampled": bool, "included": bool,
                                "train_loss": np.float64, "train_loss_after": np.float64,
                                "tilted_weight": np.float64, "num_examples": np.float64})  # fmt: skip
        return {"eval": evals, "train": train}

    def device_matrix(
        self, run_id: str, column: str = "accuracy", split: str = "test"
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """A round x device matrix of one column, for heatmaps and histograms.

        ``column`` is an evaluation column (:data:`EVAL_COLUMNS`, of ``split``)
        or a training column (:data:`TRAIN_COLUMNS`, ``split`` ignored).
        Returns (rounds, partition_ids, values) where values[i, j] belongs to
        rounds[i] and partition_ids[j], NaN where the device has no row
        (e.g. not sampled that round). Both axes list only what has rows.
        """
        self._require_run(run_id)
        if column in EVAL_COLUMNS:
            _check_split(split)
            rows = self._query(
                f"SELECT round, partition_id, {column} FROM device_eval WHERE run_id = ? AND split = ?",
                (run_id, split),
            )
        elif column in TRAIN_COLUMNS:
            rows = self._query(f"SELECT round, partition_id, {column} FROM device_train WHERE run_id = ?", (run_id,))
        else:
            raise ValueError(f"column must be one of {EVAL_COLUMNS + TRAIN_COLUMNS}, got {column!r}")
        data = _columns(rows, {"round": np.int64, "partition_id": np.int64, "value": np.float64})
        rounds, row_index = np.unique(data["round"], return_inverse=True)
        partitions, col_index = np.unique(data["partition_id"], return_inverse=True)
        matrix = np.full((rounds.size, partitions.size), np.nan)
        matrix[row_index, col_index] = data["value"]
        return rounds, partitions, matrix


def _sums_in_python(rows: list[tuple[str, int, str]], keys: list[str]) -> list[tuple[Any, ...]]:
    """What :meth:`ResultsStore.round_stats_sums`' SQL returns, computed from decoded rows (damaged ones skipped)."""
    sums: dict[tuple[str, int], list[float]] = {}
    for split, r, text in rows:
        try:
            stats = json.loads(text)
        except (ValueError, RecursionError):
            continue
        acc = sums.setdefault((split, r), [0.0] * (3 * len(keys)))
        for i, key in enumerate(keys):
            value = stats.get(key) if isinstance(stats, dict) else None
            if isinstance(value, (int, float)) and math.isfinite(value):
                acc[3 * i] += 1
                acc[3 * i + 1] += value
                acc[3 * i + 2] += value * value
    return [(split, r, *values) for (split, r), values in sums.items()]


def _chunks(items: list[Any], size: int = 500) -> Iterator[list[Any]]:
    """``items`` in slices of at most ``size`` (SQLite caps the number of ? parameters)."""
    for start in range(0, len(items), size):
        yield items[start : start + size]


def _diagnostics(value: Any, version: int) -> dict[str, Any]:
    """A round's diagnostics from ``diagnostics_json`` (or, before version 3, the running estimate column)."""
    if version >= 3:
        return json.loads(value)
    return {} if value is None else {"running_estimate": value}
