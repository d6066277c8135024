"""Writing the store: runs, rounds (one transaction each), heartbeats, the end of a run."""

from __future__ import annotations

import os
import secrets
import sqlite3
import time
from collections.abc import Iterable, Mapping
from typing import Any

from term_fl.common.keys import EVAL_SPLITS

from .errors import DuplicateRoundError, StoreError
from .rows import _EVAL_ROWS, _TRAIN_ROWS, EvalRow, TrainRow, _as_finite_real, _as_int, _as_real, _convert, _dumps, _RowSpec
from .schema import ADDED_STATS_COLUMNS, FINAL_STATUSES, INSERT_ROUND_STATS, ROUND_STATUSES, STAT_COLUMNS


def new_run_id(now: float | None = None) -> str:
    """A time-sortable run id, e.g. ``20261126-011530-ab12cd`` (UTC time + 6 random hex digits)."""
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime(time.time() if now is None else now))
    return f"{stamp}-{secrets.token_hex(3)}"


class Writes:
    """The writing methods of :class:`~term_fl.results.ResultsStore` (its connection, lock and transactions)."""

    def create_run(
        self,
        *,
        name: str,
        scenario: str,
        engine: str,
        strategy: str,
        strategy_params: Mapping[str, Any],
        seed: int,
        config_hash: str,
        config: Mapping[str, Any],
        data: Mapping[str, Any],
        rounds_planned: int,
        run_dir: str | os.PathLike[str] | None = None,
        run_id: str | None = None,
    ) -> str:
        """Register a new run (status ``running``, started now) and return its run_id.

        ``run_id`` defaults to :func:`new_run_id`; a given one must be new.
        ``config_hash`` is computed by the caller (resolved config without
        the seed). ``data`` holds the dataset's name, path and sha256.
        """
        self._writable()
        run_id = new_run_id() if run_id is None else run_id
        now = time.time()
        if not isinstance(run_id, str) or not run_id:
            raise ValueError(f"run_id must be a non-empty string, got {run_id!r}")
        row = (
            run_id, str(name), str(scenario), str(engine), str(strategy), _dumps(strategy_params, "strategy_params"),
            _convert(_as_int, seed, "seed"), str(config_hash), _dumps(config, "config"), _dumps(data, "data"),
            "running", _convert(_as_int, rounds_planned, "rounds_planned"), now, now,
            None if run_dir is None else os.fspath(run_dir),
        )  # fmt: skip
        with self._transaction():
            if self._conn.execute("SELECT 1 FROM runs WHERE run_id = ?", (run_id,)).fetchone():
                raise StoreError(f"run {run_id!r} already exists in {self.path}; choose another run_id")
            self._conn.execute(
                "INSERT INTO runs (run_id, name, scenario, engine, strategy, strategy_params_json, seed, "
                "config_hash, config_json, data_json, status, rounds_planned, started_at, heartbeat_at, run_dir) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                row,
            )
        return run_id

    def record_round(
        self,
        run_id: str,
        round: int,
        *,
        train_rows: Iterable[TrainRow | Mapping[str, Any]] = (),
        eval_rows: Iterable[EvalRow | Mapping[str, Any]] = (),
        stats: Mapping[str, Mapping[str, Any]] | None = None,
        status: str = "ok",
        diagnostics: Mapping[str, Any] | None = None,
        duration_s: float | None = None,
        excluded: Iterable[Mapping[str, Any]] = (),
    ) -> None:
        """Store one round of a running run, in one transaction: all of it or nothing.

        Parameters
        ----------
        run_id, round
            The run (must be ``running``) and the round number; a round is
            recorded once (:class:`DuplicateRoundError` otherwise).
        train_rows
            :class:`TrainRow` or dicts with its field names, one per device.
        eval_rows
            :class:`EvalRow` or dicts, one per device and split (val | test).
        stats
            Split -> fairness statistics and loss risks of that split.
        status
            ``ok``, or ``failed`` for a round without a valid reply.
        diagnostics
            The strategy's own numbers of the round, by name (TERM:
            ``running_estimate``; AFL: ``mixture_weights``); stored as JSON.
        duration_s
            Wall time of the round.
        excluded
            Replies left out: dicts {node_id, partition_id, reason}.

        ``runs.rounds_completed`` counts the recorded rounds, failed ones
        included. A row with a wrong key or value raises ValueError naming
        it, and nothing of the round is stored.
        """
        self._writable()
        if status not in ROUND_STATUSES:
            raise ValueError(f"round status must be one of {ROUND_STATUSES}, got {status!r}")
        round = _convert(_as_int, round, "round")
        stats = dict(stats or {})
        bad_splits = sorted(set(stats) - set(EVAL_SPLITS))
        if bad_splits:
            raise ValueError(f"stats splits must be among {EVAL_SPLITS}, got {bad_splits}")
        stats_rows = [
            (run_id, round, split, *(_convert(_as_real, s.get(c), f"stats[{split!r}][{c!r}]") for c in STAT_COLUMNS),
             _dumps(s, f"stats[{split!r}]"),
             *(_convert(_as_finite_real, s.get(c), f"stats[{split!r}][{c!r}]") for c in ADDED_STATS_COLUMNS))
            for split, s in stats.items()
        ]  # fmt: skip
        excluded_json = _dumps(list(excluded), "excluded")
        diagnostics_json = _dumps(dict(diagnostics or {}), "diagnostics")
        with self._transaction():
            self._require_status(run_id, "running", f"record round {round}")
            if self._conn.execute("SELECT 1 FROM rounds WHERE run_id = ? AND round = ?", (run_id, round)).fetchone():
                raise DuplicateRoundError(f"round {round} of run {run_id!r} is already recorded")
            self._conn.execute(
                "INSERT INTO rounds (run_id, round, status, num_sampled, num_included, duration_s, excluded_json, "
                "diagnostics_json) VALUES (?, ?, ?, 0, 0, ?, ?, ?)",
                (run_id, round, status, _convert(_as_real, duration_s, "duration_s"), excluded_json, diagnostics_json),
            )
            try:
                self._insert_rows("device_train", run_id, round, train_rows, _TRAIN_ROWS, "train_rows")
                self._insert_rows("device_eval", run_id, round, eval_rows, _EVAL_ROWS, "eval_rows")
                self._conn.executemany(INSERT_ROUND_STATS, stats_rows)
            except sqlite3.IntegrityError as exc:
                raise StoreError(f"round {round} of run {run_id!r} was not recorded: {exc}") from exc
            self._conn.execute(
                "UPDATE rounds SET (num_sampled, num_included) = (SELECT coalesce(sum(sampled), 0), "
                "coalesce(sum(included), 0) FROM device_train WHERE run_id = :run_id AND round = :round) "
                "WHERE run_id = :run_id AND round = :round",
                {"run_id": run_id, "round": round},
            )
            self._conn.execute(
                "UPDATE runs SET rounds_completed = rounds_completed + 1, heartbeat_at = ? WHERE run_id = ?",
                (time.time(), run_id),
            )

    def _insert_rows(self, table: str, run_id: str, round: int, rows: Iterable[Any], spec: _RowSpec, what: str) -> None:
        """Insert per-device rows: as given when SQLite's type checks accept them, else converted.

        Rows of the row dataclass, and dicts with exactly its keys, go to
        SQLite as they are (plain floats, ints and bools need no work; NaN
        binds as NULL). When a check refuses a value (a numpy integer, a
        string ...), the rows are inserted again through spec.convert, which
        converts what it can and names the row and field of what it cannot.
        """
        sql = f"INSERT INTO {table} VALUES ({', '.join('?' * (len(spec.names) + 2))})"
        rows = list(rows)
        self._conn.execute("SAVEPOINT rows")
        try:
            self._conn.executemany(sql, spec.fast(run_id, round, rows, what))
        except (sqlite3.IntegrityError, sqlite3.InterfaceError, sqlite3.ProgrammingError):
            self._conn.execute("ROLLBACK TO rows")
            self._conn.executemany(sql, spec.convert(run_id, round, rows, what))
        finally:
            self._conn.execute("RELEASE rows")

    def finish_run(
        self,
        run_id: str,
        status: str = "finished",
        summary: Mapping[str, Any] | None = None,
        error: str | None = None,
    ) -> None:
        """Close a running run: status ``finished``, ``failed`` or ``interrupted``, with its summary.

        The server calls ``interrupted`` on KeyboardInterrupt and ``failed``
        (with the error text) on an exception. A run is finished once.
        """
        self._writable()
        if status not in FINAL_STATUSES:
            raise ValueError(f"a run finishes as one of {FINAL_STATUSES}, got {status!r}")
        summary_json = None if summary is None else _dumps(summary, "summary")
        with self._transaction():
            self._require_status(run_id, "running", f"finish it as {status!r}")
            self._conn.execute(
                "UPDATE runs SET status = ?, finished_at = ?, summary_json = ?, error = ? WHERE run_id = ?",
                (status, time.time(), summary_json, error, run_id),
            )

    def reopen_run(self, run_id: str, keep_rounds: int) -> None:
        """Make a run that stopped ``running`` again, to go on after round ``keep_rounds`` (``term-fl run --resume``).

        In one transaction: its rounds after ``keep_rounds`` are removed (with
        their device rows and statistics: they run again), its end
        (``finished_at``, ``error``, ``summary_json``) is cleared and its
        heartbeat is now. A finished run is not reopened.
        """
        self._writable()
        keep_rounds = _convert(_as_int, keep_rounds, "keep_rounds")
        with self._transaction():
            row = self._conn.execute("SELECT status FROM runs WHERE run_id = ?", (run_id,)).fetchone()
            if row is None:
                raise self._not_found(run_id)
            if row[0] == "finished":
                raise StoreError(f"run {run_id!r} finished; there is nothing to resume")
            self._conn.execute("DELETE FROM rounds WHERE run_id = ? AND round > ?", (run_id, keep_rounds))
            self._conn.execute(
                "UPDATE runs SET status = 'running', finished_at = NULL, error = NULL, summary_json = NULL, "
                "heartbeat_at = ?, rounds_completed = (SELECT count(*) FROM rounds WHERE run_id = ?) WHERE run_id = ?",
                (time.time(), run_id, run_id),
            )

    def move_run_dir(self, old: str | os.PathLike[str], new: str | os.PathLike[str]) -> int:
        """Point the runs whose ``run_dir`` is ``old`` to ``new`` (their files were moved there); how many."""
        self._writable()
        with self._transaction():
            cursor = self._conn.execute("UPDATE runs SET run_dir = ? WHERE run_dir = ?", (os.fspath(new), os.fspath(old)))
        return cursor.rowcount

    def heartbeat(self, run_id: str) -> bool:
        """Record a sign of life of a running run (the writer calls it every HEARTBEAT_S seconds).

        Returns False when the run is not running (any more); never raises
        for that, so a late heartbeat after ``finish_run`` is harmless.
        """
        self._writable()
        with self._transaction():
            cursor = self._conn.execute(
                "UPDATE runs SET heartbeat_at = ? WHERE run_id = ? AND status = 'running'", (time.time(), run_id)
            )
        return cursor.rowcount == 1
