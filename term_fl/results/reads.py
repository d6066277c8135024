"""Reading the store: runs (with their derived status), rounds, per-device rows, statistics."""

from __future__ import annotations

import json
import time
from typing import Any

import numpy as np

from . import schema
from .rows import RunInfo, _check_split, _columns, _nan_for_null, _nan_if_none, _run_info
from .schema import EVAL_COLUMNS, RUN_STATUSES, TRAIN_COLUMNS, _RUN_COLUMNS


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
        self, scenario: str | None = None, status: str | None = None, config_hash: str | None = None
    ) -> list[RunInfo]:
        """Runs matching every given filter, newest first.

        ``status`` may be ``lost`` (running, heartbeat older than
        LOST_AFTER_S); ``running`` then means running with a fresh heartbeat.
        """
        if status is not None and status not in RUN_STATUSES:
            raise ValueError(f"status must be one of {RUN_STATUSES}, got {status!r}")
        now = time.time()
        where, params = [], []
        for column, value in (("scenario", scenario), ("config_hash", config_hash)):
            if value is not None:
                where.append(f"{column} = ?")
                params.append(value)
        if status in ("running", "lost"):
            where.append(f"status = 'running' AND {self._last_sign_of_life()} {'<' if status == 'lost' else '>='} ?")
            params.append(now - schema.LOST_AFTER_S)
        elif status is not None:
            where.append("status = ?")
            params.append(status)
        sql = f"SELECT {self._columns_sql()} FROM runs"
        if where:
            sql += " WHERE " + " AND ".join(where)
        sql += " ORDER BY started_at DESC, run_id DESC"
        rows = self._query(sql, tuple(params))
        return [_run_info(row, now) for row in rows]

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


def _diagnostics(value: Any, version: int) -> dict[str, Any]:
    """A round's diagnostics from ``diagnostics_json`` (or, before version 3, the running estimate column)."""
    if version >= 3:
        return json.loads(value)
    return {} if value is None else {"running_estimate": value}
