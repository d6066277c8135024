"""The results store: every run, every round, every device, in one SQLite file.

The server loop writes it, the dashboard and the CLI read it. It is plain
stdlib ``sqlite3`` in WAL mode, so readers (other threads or processes, e.g.
:meth:`ResultsStore.open_readonly`) never block the writer and never see a
half-written round.

Tables (``PRAGMA user_version`` holds :data:`SCHEMA_VERSION`,
``PRAGMA application_id`` marks the file as a term-fl store):

``runs``
    One row per run: ``run_id``, ``name``, ``scenario``, ``engine``,
    ``strategy`` with ``strategy_params_json``, ``seed``, ``config_hash`` (the
    hash of the resolved config without the seed: it groups the seeds of one
    sweep cell), ``config_json``, ``data_json`` (name, path, sha256),
    ``status`` (running | finished | failed | interrupted), ``error``,
    ``rounds_planned``, ``rounds_completed``, ``started_at``, ``finished_at``
    (Unix seconds), ``run_dir``, ``summary_json``, ``heartbeat_at`` (Unix
    seconds: the writer's last sign of life, every round and every
    :data:`HEARTBEAT_S` seconds; schema version 2).
``rounds``
    One row per recorded round: ``status`` (ok | failed), the TERM
    ``running_estimate``, ``num_sampled``, ``num_included``, ``duration_s``,
    ``excluded_json`` (list of {node_id, partition_id, reason}).
``device_train``
    Per round and device (the sampled ones, or all): ``sampled``, ``included`` (reply valid and
    aggregated), ``train_loss`` (F_k, the loss of the incoming model),
    ``train_loss_after``, ``tilted_weight`` (the aggregation weight applied),
    ``num_examples``.
``device_eval``
    Per round, device and split (val | test): ``loss``, ``accuracy``,
    ``correct``, ``examples``.
``round_stats``
    Per round and split: the fairness statistics and loss risks as
    ``stats_json`` (keys of :mod:`term_fl.fairness`), plus real columns for
    the ones a table sorts on (mean, pooled_mean, worst_10, best_10, std).

Conventions:

- A round is one transaction (:meth:`ResultsStore.record_round`): all of it
  is stored, or nothing. Recording a round twice is an error.
- NaN is stored as SQL NULL and read back as NaN; ±inf are kept. JSON
  columns hold standard JSON, where a non-finite number is ``null``;
  :meth:`ResultsStore.load_round_stats` reads such a ``null`` back as NaN
  (statistics are numbers), the other JSON columns keep it as None.
- A run killed hard (SIGKILL, power off, ``os._exit``) keeps ``running``
  in its ``status`` column; every round it completed is stored and
  readable. Its heartbeat stops, and readers show a ``running`` run whose
  heartbeat is older than :data:`LOST_AFTER_S` seconds as ``lost``
  (:attr:`RunInfo.status`; the ``status`` filter of :meth:`ResultsStore.list_runs`
  knows it too). No process ids are involved, so a reader in another
  container or on another machine (with a clock within a few seconds)
  judges the same. A lost run whose writer comes back is ``running`` again
  at its next heartbeat. The server calls ``finish_run(run_id,
  "interrupted")`` on KeyboardInterrupt and ``"failed"`` on an exception.
- Schema versions: 1 (0.1.x), 2 (adds ``runs.heartbeat_at``). Opening a
  store of an older version for writing migrates it in place, in one
  transaction (:data:`MIGRATIONS`); read-only opening reads versions 1 and 2
  without changing the file.
- ``synchronous=NORMAL``: a committed round survives a crash of the
  process; a power loss may lose the last rounds, never corrupt the file.
"""

from __future__ import annotations

import json
import logging
import math
import os
import secrets
import sqlite3
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import MISSING, dataclass, fields
from operator import attrgetter, itemgetter
from pathlib import Path
from typing import Any

import numpy as np

from term_fl.jsonable import plain
from term_fl.keys import EVAL_SPLITS

log = logging.getLogger("term_fl")

__all__ = [
    "EVAL_COLUMNS",
    "RUN_STATUSES",
    "SCHEMA_VERSION",
    "STAT_COLUMNS",
    "TRAIN_COLUMNS",
    "DuplicateRoundError",
    "EvalRow",
    "ResultsStore",
    "RunInfo",
    "RunNotFound",
    "StoreError",
    "TrainRow",
    "new_run_id",
]

SCHEMA_VERSION = 2
# Statements that bring a store of version v to v + 1, run in one transaction.
MIGRATIONS: dict[int, tuple[str, ...]] = {
    1: ("ALTER TABLE runs ADD COLUMN heartbeat_at REAL",),
}
READABLE_VERSIONS = (1, 2)
# A running run records a heartbeat every HEARTBEAT_S seconds (and every
# round); readers call it lost when the last one is older than LOST_AFTER_S.
HEARTBEAT_S = 5.0
LOST_AFTER_S = 60.0
# How long opening or writing waits for a lock another connection holds
# (a reader's open transaction, another writer) before it gives up.
BUSY_TIMEOUT_S = 60.0
BUSY_POLL_S = 2.0
APPLICATION_ID = int.from_bytes(b"TRFL", "big")  # marks a SQLite file as a term-fl store
STORED_STATUSES = ("running", "finished", "failed", "interrupted")
RUN_STATUSES = (*STORED_STATUSES, "lost")  # "lost": running, with a stale heartbeat (derived when read)
FINAL_STATUSES = STORED_STATUSES[1:]
ROUND_STATUSES = ("ok", "failed")
STAT_COLUMNS = ("mean", "pooled_mean", "worst_10", "best_10", "std")
TRAIN_COLUMNS = ("sampled", "included", "train_loss", "train_loss_after", "tilted_weight", "num_examples")
EVAL_COLUMNS = ("loss", "accuracy", "correct", "examples")


def _is_busy(exc: sqlite3.OperationalError) -> bool:
    text = str(exc)
    return "locked" in text or "busy" in text


def _integer(name: str, *, nullable: bool = False) -> str:
    """An INTEGER column that refuses other types.

    sqlite3 binds numpy scalars as BLOBs and SQLite would keep them: these
    checks refuse them (and text), and the insert then falls back to
    converting and validating the rows in Python (see _insert_rows).
    """
    if nullable:
        return f"{name} INTEGER CHECK (typeof({name}) IN ('integer', 'null'))"
    return f"{name} INTEGER NOT NULL CHECK (typeof({name}) = 'integer')"


def _real(name: str) -> str:
    """A REAL column (NULL allowed: NaN binds as NULL) that refuses other types."""
    return f"{name} REAL CHECK (typeof({name}) IN ('real', 'null'))"


_SCHEMA = (
    f"""CREATE TABLE runs (
        run_id TEXT PRIMARY KEY,
        name TEXT NOT NULL,
        scenario TEXT NOT NULL,
        engine TEXT NOT NULL,
        strategy TEXT NOT NULL,
        strategy_params_json TEXT NOT NULL,
        seed INTEGER NOT NULL,
        config_hash TEXT NOT NULL,
        config_json TEXT NOT NULL,
        data_json TEXT NOT NULL,
        status TEXT NOT NULL CHECK (status IN {STORED_STATUSES}),
        error TEXT,
        rounds_planned INTEGER NOT NULL,
        rounds_completed INTEGER NOT NULL DEFAULT 0,
        started_at REAL NOT NULL,
        finished_at REAL,
        run_dir TEXT,
        summary_json TEXT,
        heartbeat_at REAL
    )""",
    "CREATE INDEX runs_by_scenario ON runs (scenario, started_at)",
    "CREATE INDEX runs_by_config_hash ON runs (config_hash, started_at)",
    "CREATE INDEX runs_by_started_at ON runs (started_at)",
    f"""CREATE TABLE rounds (
        run_id TEXT NOT NULL REFERENCES runs (run_id) ON DELETE CASCADE,
        round INTEGER NOT NULL,
        status TEXT NOT NULL CHECK (status IN {ROUND_STATUSES}),
        running_estimate REAL,
        num_sampled INTEGER NOT NULL,
        num_included INTEGER NOT NULL,
        duration_s REAL,
        excluded_json TEXT NOT NULL,
        PRIMARY KEY (run_id, round)
    ) WITHOUT ROWID""",
    f"""CREATE TABLE device_train (
        run_id TEXT NOT NULL,
        round INTEGER NOT NULL,
        {_integer("partition_id")},
        sampled INTEGER NOT NULL CHECK (sampled IN (0, 1)),
        included INTEGER NOT NULL CHECK (included IN (0, 1)),
        {_real("train_loss")},
        {_real("train_loss_after")},
        {_real("tilted_weight")},
        {_integer("num_examples", nullable=True)},
        PRIMARY KEY (run_id, round, partition_id),
        FOREIGN KEY (run_id, round) REFERENCES rounds (run_id, round)
            ON DELETE CASCADE
    ) WITHOUT ROWID""",
    f"""CREATE TABLE device_eval (
        run_id TEXT NOT NULL,
        round INTEGER NOT NULL,
        {_integer("partition_id")},
        split TEXT NOT NULL CHECK (split IN {EVAL_SPLITS}),
        {_real("loss")},
        {_real("accuracy")},
        {_integer("correct")},
        {_integer("examples")},
        PRIMARY KEY (run_id, round, split, partition_id),
        FOREIGN KEY (run_id, round) REFERENCES rounds (run_id, round)
            ON DELETE CASCADE
    ) WITHOUT ROWID""",
    f"""CREATE TABLE round_stats (
        run_id TEXT NOT NULL,
        round INTEGER NOT NULL,
        split TEXT NOT NULL CHECK (split IN {EVAL_SPLITS}),
        {", ".join(f"{c} REAL" for c in STAT_COLUMNS)},
        stats_json TEXT NOT NULL,
        PRIMARY KEY (run_id, round, split),
        FOREIGN KEY (run_id, round) REFERENCES rounds (run_id, round)
            ON DELETE CASCADE
    ) WITHOUT ROWID""",
)

_RUN_COLUMNS = (
    "run_id, name, scenario, engine, strategy, strategy_params_json, seed, config_hash, config_json, "
    "data_json, status, error, rounds_planned, rounds_completed, started_at, finished_at, run_dir, "
    "summary_json, {heartbeat}"
)


class StoreError(Exception):
    """The results store cannot do what was asked (missing file, wrong schema, finished run ...)."""


class RunNotFound(StoreError, KeyError):
    """No run with this run_id in the store."""

    def __str__(self) -> str:  # KeyError would print the message in quotes
        return str(self.args[0])


class DuplicateRoundError(StoreError):
    """This round of this run is already recorded."""


@dataclass(frozen=True, slots=True)
class TrainRow:
    """One sampled device's training reply in one round (a dict with these keys works too).

    Parameters
    ----------
    partition_id
        The device.
    sampled
        Whether the device was sampled this round (default True).
    included
        Whether its reply was valid and aggregated (default True).
    train_loss
        F_k: loss of the incoming global model on the device's train split.
    train_loss_after
        Loss after local training.
    tilted_weight
        The aggregation weight the strategy applied (None if not included).
    num_examples
        Training examples the device reported (None if no reply).
    """

    partition_id: int
    sampled: bool = True
    included: bool = True
    train_loss: float | None = None
    train_loss_after: float | None = None
    tilted_weight: float | None = None
    num_examples: int | None = None


@dataclass(frozen=True, slots=True)
class EvalRow:
    """One device's evaluation of the global model on one split (a dict with these keys works too)."""

    partition_id: int
    split: str
    loss: float | None
    accuracy: float | None
    correct: int
    examples: int


@dataclass(frozen=True, slots=True)
class RunInfo:
    """A row of ``runs``, with its JSON columns decoded."""

    run_id: str
    name: str
    scenario: str
    engine: str
    strategy: str
    strategy_params: dict[str, Any]
    seed: int
    config_hash: str
    config: dict[str, Any]
    data: dict[str, Any]
    status: str
    error: str | None
    rounds_planned: int
    rounds_completed: int
    started_at: float
    finished_at: float | None
    run_dir: str | None
    summary: dict[str, Any] | None
    heartbeat_at: float | None = None
    """The writer's last sign of life (None for runs of schema version 1)."""
    damaged: tuple[str, ...] = ()
    """JSON columns of the row that could not be decoded (their values read as empty); () for a sound row."""


def new_run_id(now: float | None = None) -> str:
    """A time-sortable run id, e.g. ``20261126-011530-ab12cd`` (UTC time + 6 random hex digits)."""
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime(time.time() if now is None else now))
    return f"{stamp}-{secrets.token_hex(3)}"


class ResultsStore:
    """The results database of term-fl runs.

    Parameters
    ----------
    path
        The SQLite file; created with its parent folders if missing. The CLI
        passes an absolute path (the ServerApp's working directory is not the
        user's).

    One connection, guarded by a lock: one writer thread plus any number of
    reader threads may share a store. Other processes open their own
    (:meth:`open_readonly` for readers). Use it as a context manager or call
    :meth:`close`.
    """

    def __init__(self, path: str | os.PathLike[str], *, _readonly: bool = False) -> None:
        self.path = Path(path)
        self.readonly = _readonly
        self.version = SCHEMA_VERSION  # the version read from the file, once opened
        self._lock = threading.RLock()
        if self.path.is_dir():
            raise StoreError(f"{self.path} is a directory; give the path of a results database file")
        try:
            if _readonly:
                if not self.path.is_file():
                    raise StoreError(f"no results database at {self.path}: the file does not exist")
                uri = f"{self.path.resolve().as_uri()}?mode=ro"
                self._conn = sqlite3.connect(uri, uri=True, timeout=BUSY_POLL_S, isolation_level=None, check_same_thread=False)
            else:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                self._conn = sqlite3.connect(self.path, timeout=BUSY_POLL_S, isolation_level=None, check_same_thread=False)
        except (OSError, sqlite3.Error) as exc:
            reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
            raise StoreError(f"cannot open the results database {self.path}: {reason}") from exc
        try:
            self._wait_while_busy(self._open_schema)
        except sqlite3.OperationalError as exc:  # unreadable, read-only, I/O error: not a wrong file
            self._conn.close()
            raise StoreError(f"cannot use the results database {self.path}: {exc}") from exc
        except sqlite3.DatabaseError as exc:
            self._conn.close()
            raise StoreError(f"{self.path} is not a term-fl results database (SQLite: {exc})") from exc
        except StoreError:
            self._conn.close()
            raise
        self._conn.execute(f"PRAGMA busy_timeout = {int(BUSY_TIMEOUT_S * 1000)}")

    def _open_schema(self) -> None:
        self._conn.execute("PRAGMA foreign_keys = ON")
        if self.readonly:
            self._check_schema()
        else:
            self._conn.execute("PRAGMA journal_mode = WAL")
            self._conn.execute("PRAGMA synchronous = NORMAL")
            self._create_or_check_schema()

    def _wait_while_busy(self, action: Callable[[], None]) -> None:
        """Run ``action``, waiting up to BUSY_TIMEOUT_S while another connection locks the file.

        A busy store is not a broken one: a reader with an open transaction
        (or another writer) holds a lock; say so once, wait, and name the
        cause if it does not go away.
        """
        deadline = time.monotonic() + BUSY_TIMEOUT_S
        told = False
        while True:
            try:
                return action()
            except sqlite3.OperationalError as exc:
                if not _is_busy(exc):
                    raise
                if time.monotonic() >= deadline:
                    raise StoreError(
                        f"the results database {self.path} is busy: another connection has held a lock on it for "
                        f"{BUSY_TIMEOUT_S:g} s (a reader with an open transaction, or another writer); the file "
                        "is not damaged: try again once that connection is closed"
                    ) from exc
                if not told:
                    told = True
                    log.warning("waiting for the results database %s: another connection holds a lock on it "
                                "(up to %g s)", self.path, BUSY_TIMEOUT_S)

    @classmethod
    def open_readonly(cls, path: str | os.PathLike[str]) -> ResultsStore:
        """Open an existing store for reading only (the dashboard); never creates a file.

        Raises :class:`StoreError` naming the path when the file is missing,
        is not a SQLite database, or is not a term-fl store of this schema.
        """
        return cls(path, _readonly=True)

    def close(self) -> None:
        """Close the connection.

        A writer leaves the file in rollback-journal mode when it is the last
        connection, so that a read-only reader (the dashboard, possibly on a
        read-only mount) can open a finished store without creating -wal/-shm
        files; the next writer switches back to WAL.
        """
        with self._lock:
            if not self.readonly:
                try:
                    self._conn.execute("PRAGMA journal_mode = DELETE")
                except sqlite3.OperationalError:
                    pass  # another connection still uses the WAL: it stays
            self._conn.close()

    def __enter__(self) -> ResultsStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"ResultsStore({str(self.path)!r}{', readonly' if self.readonly else ''})"

    # -- schema ---------------------------------------------------------------

    def _pragma(self, name: str) -> int:
        return self._conn.execute(f"PRAGMA {name}").fetchone()[0]

    def _check_schema(self) -> None:
        app_id, version = self._pragma("application_id"), self._pragma("user_version")
        if app_id == 0 and version == 0 and not self._has_tables():
            raise StoreError(f"{self.path} is an empty SQLite database, not a term-fl results store")
        if app_id != APPLICATION_ID:
            raise StoreError(
                f"{self.path} is a SQLite database but not a term-fl results store "
                f"(application_id {app_id}, expected {APPLICATION_ID})"
            )
        readable = READABLE_VERSIONS if self.readonly else (SCHEMA_VERSION,)
        if version not in readable:
            newer = "a newer term-fl: upgrade term-fl to read it" if version > SCHEMA_VERSION else "an older term-fl"
            raise StoreError(
                f"{self.path} has results schema version {version}, this term-fl reads versions "
                f"{', '.join(map(str, readable))}; it was written by {newer}"
            )
        self.version = version

    def _has_tables(self) -> bool:
        return self._conn.execute("SELECT 1 FROM sqlite_master LIMIT 1").fetchone() is not None

    def _create_or_check_schema(self) -> None:
        with self._transaction():
            if self._pragma("application_id") == 0 and self._pragma("user_version") == 0 and not self._has_tables():
                for statement in _SCHEMA:
                    self._conn.execute(statement)
                self._conn.execute(f"PRAGMA application_id = {APPLICATION_ID}")
                self._conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
            else:
                self._migrate()
                self._check_schema()

    def _migrate(self) -> None:
        """Bring an older term-fl store to SCHEMA_VERSION in place (inside the caller's transaction)."""
        if self._pragma("application_id") != APPLICATION_ID:
            return  # _check_schema names the problem
        version = start = self._pragma("user_version")
        while version < SCHEMA_VERSION and version in MIGRATIONS:
            for statement in MIGRATIONS[version]:
                self._conn.execute(statement)
            version += 1
            self._conn.execute(f"PRAGMA user_version = {version}")
        if version != start:
            log.info("results store %s: schema migrated from version %d to %d", self.path, start, version)

    def _transaction(self) -> _Transaction:
        return _Transaction(self._conn, self._lock)

    def _writable(self) -> None:
        if self.readonly:
            raise StoreError(f"{self.path} was opened read-only; open it with ResultsStore(path) to write")

    # -- writing --------------------------------------------------------------

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
        running_estimate: float | None = None,
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
        running_estimate
            TERM's running estimate of the tilted objective (None otherwise).
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
             _dumps(s, f"stats[{split!r}]"))
            for split, s in stats.items()
        ]  # fmt: skip
        excluded_json = _dumps(list(excluded), "excluded")
        with self._transaction():
            self._require_status(run_id, "running", f"record round {round}")
            if self._conn.execute("SELECT 1 FROM rounds WHERE run_id = ? AND round = ?", (run_id, round)).fetchone():
                raise DuplicateRoundError(f"round {round} of run {run_id!r} is already recorded")
            self._conn.execute(
                "INSERT INTO rounds VALUES (?, ?, ?, ?, 0, 0, ?, ?)",
                (run_id, round, status, _convert(_as_real, running_estimate, "running_estimate"),
                 _convert(_as_real, duration_s, "duration_s"), excluded_json),
            )  # fmt: skip
            try:
                self._insert_rows("device_train", run_id, round, train_rows, _TRAIN_ROWS, "train_rows")
                self._insert_rows("device_eval", run_id, round, eval_rows, _EVAL_ROWS, "eval_rows")
                self._conn.executemany("INSERT INTO round_stats VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)", stats_rows)
            except sqlite3.IntegrityError as exc:
                raise StoreError(f"round {round} of run {run_id!r} was not recorded: {exc}") from exc
            self._conn.execute(
                "UPDATE rounds SET (num_sampled, num_included) = (SELECT coalesce(sum(sampled), 0), "
                "coalesce(sum(included), 0) FROM device_train WHERE run_id = ?1 AND round = ?2) "
                "WHERE run_id = ?1 AND round = ?2",
                (run_id, round),
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

    def move_run_dir(self, old: str | os.PathLike[str], new: str | os.PathLike[str]) -> int:
        """Point the runs whose ``run_dir`` is ``old`` to ``new`` (their files were moved there); how many."""
        self._writable()
        with self._transaction():
            cursor = self._conn.execute("UPDATE runs SET run_dir = ? WHERE run_dir = ?", (os.fspath(new), os.fspath(old)))
        return cursor.rowcount

    def _require_status(self, run_id: str, expected: str, action: str) -> None:
        row = self._conn.execute("SELECT status FROM runs WHERE run_id = ?", (run_id,)).fetchone()
        if row is None:
            raise self._not_found(run_id)
        if row[0] != expected:
            raise StoreError(f"cannot {action} of run {run_id!r}: the run is {row[0]}, not {expected}")

    def _not_found(self, run_id: str) -> RunNotFound:
        return RunNotFound(f"no run {run_id!r} in {self.path}")

    # -- reading --------------------------------------------------------------

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
            params.append(now - LOST_AFTER_S)
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
        """One dict per recorded round: round, status, running_estimate, num_sampled,
        num_included, duration_s (NaN where missing) and excluded (list of dicts)."""
        self._require_run(run_id)
        rows = self._query(
            "SELECT round, status, running_estimate, num_sampled, num_included, duration_s, excluded_json "
            "FROM rounds WHERE run_id = ? ORDER BY round",
            (run_id,),
        )
        return [
            {"round": r, "status": status, "running_estimate": _nan_if_none(estimate), "num_sampled": sampled,
             "num_included": included, "duration_s": _nan_if_none(duration), "excluded": json.loads(excluded)}
            for r, status, estimate, sampled, included, duration, excluded in rows
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


class _Transaction:
    """``BEGIN IMMEDIATE`` ... ``COMMIT``, or ``ROLLBACK`` on any exception, under the store's lock."""

    def __init__(self, conn: sqlite3.Connection, lock: threading.RLock) -> None:
        self._conn, self._lock = conn, lock

    def __enter__(self) -> None:
        self._lock.acquire()
        try:
            self._conn.execute("BEGIN IMMEDIATE")
        except BaseException:
            self._lock.release()
            raise

    def __exit__(self, exc_type: type[BaseException] | None, *exc: object) -> None:
        try:
            if exc_type is None:
                self._conn.execute("COMMIT")
        finally:
            try:
                if self._conn.in_transaction:  # an exception, or a COMMIT that failed
                    self._conn.execute("ROLLBACK")
            finally:
                self._lock.release()


# -- row conversion -----------------------------------------------------------

_REQUIRED = object()


def _convert(convert: Callable[[Any], Any], value: Any, what: str) -> Any:
    """convert(value), or a ValueError naming the value's place."""
    try:
        return convert(value)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{what}: {exc}") from None


def _as_real(value: Any) -> float | None:
    """A float for a REAL column; NaN and None become None (SQL NULL)."""
    if value is None:
        return None
    if isinstance(value, (str, bytes)):
        raise TypeError(f"expected a number, got {value!r}")
    value = float(value)
    return None if value != value else value


def _as_int(value: Any) -> int:
    """An int for an INTEGER column; integral floats (3.0) pass, 3.5 or '3' do not."""
    if isinstance(value, (float, np.floating)):
        if not float(value).is_integer():
            raise ValueError(f"expected an integer, got {value!r}")
        return int(value)
    try:
        return int(value.__index__())
    except AttributeError:
        raise TypeError(f"expected an integer, got {value!r}") from None


def _as_optional_int(value: Any) -> int | None:
    """An int, or None for None and NaN (a count the device did not send)."""
    if value is None or (isinstance(value, (float, np.floating)) and value != value):
        return None
    return _as_int(value)


def _as_flag(value: Any) -> int:
    """0 or 1 for a bool column."""
    flag = int(value) if isinstance(value, np.bool_) else _as_int(value)
    if flag not in (0, 1):
        raise ValueError(f"expected 0/1 or a bool, got {value!r}")
    return flag


def _as_split(value: Any) -> str:
    _check_split(value)
    return value


def _check_split(split: Any) -> None:
    if split not in EVAL_SPLITS:
        raise ValueError(f"split must be one of {EVAL_SPLITS}, got {split!r}")


class _RowSpec:
    """How rows of one per-device table become SQL parameters (after run_id, round)."""

    def __init__(self, cls: type, converters: dict[str, Callable[[Any], Any]]) -> None:
        self.cls = cls
        self.names = tuple(f.name for f in fields(cls))
        self.key_set = frozenset(self.names)
        self.defaults = tuple(_REQUIRED if f.default is MISSING else f.default for f in fields(cls))
        self.converters = tuple(converters[name] for name in self.names)
        self._attributes = attrgetter(*self.names)
        self._items = itemgetter(*self.names)

    def fast(self, run_id: str, round: int, rows: list[Any], what: str) -> Iterator[tuple[Any, ...]]:
        """Parameters without conversion where a row is a dataclass or a dict with every key."""
        prefix = (run_id, round)
        for i, row in enumerate(rows):
            if type(row) is self.cls:
                yield prefix + self._attributes(row)
            elif type(row) is dict and row.keys() == self.key_set:
                yield prefix + self._items(row)
            else:
                yield self._converted(prefix, i, row, what)

    def convert(self, run_id: str, round: int, rows: list[Any], what: str) -> Iterator[tuple[Any, ...]]:
        """Parameters converted and validated value by value."""
        prefix = (run_id, round)
        for i, row in enumerate(rows):
            yield self._converted(prefix, i, row, what)

    def _converted(self, prefix: tuple[str, int], i: int, row: Any, what: str) -> tuple[Any, ...]:
        if isinstance(row, Mapping):
            unknown = row.keys() - self.key_set
            if unknown:
                raise ValueError(f"{what}[{i}] has unknown keys {sorted(unknown)}; allowed: {list(self.names)}")
            values = [row.get(name, default) for name, default in zip(self.names, self.defaults, strict=True)]
        else:
            values = [getattr(row, name, default) for name, default in zip(self.names, self.defaults, strict=True)]
        params = list(prefix)
        for name, convert, value in zip(self.names, self.converters, values, strict=True):
            if value is _REQUIRED:
                raise ValueError(f"{what}[{i}] has no {name!r}")
            try:
                params.append(convert(value))
            except (TypeError, ValueError) as exc:
                raise ValueError(f"{what}[{i}][{name!r}]: {exc}") from None
        return tuple(params)


_TRAIN_ROWS = _RowSpec(
    TrainRow,
    {"partition_id": _as_int, "sampled": _as_flag, "included": _as_flag, "train_loss": _as_real,
     "train_loss_after": _as_real, "tilted_weight": _as_real, "num_examples": _as_optional_int},
)  # fmt: skip
_EVAL_ROWS = _RowSpec(
    EvalRow,
    {"partition_id": _as_int, "split": _as_split, "loss": _as_real, "accuracy": _as_real,
     "correct": _as_int, "examples": _as_int},
)  # fmt: skip


# -- decoding -----------------------------------------------------------------


def _columns(rows: list[tuple[Any, ...]], dtypes: dict[str, Any]) -> dict[str, np.ndarray]:
    """Column arrays of query rows; NULL becomes NaN in float columns."""
    if not rows:
        return {name: np.empty(0, dtype=dtype) for name, dtype in dtypes.items()}
    columns = zip(*rows, strict=True)
    return {name: np.array(column, dtype=dtype) for (name, dtype), column in zip(dtypes.items(), columns, strict=True)}


def _nan_if_none(value: float | None) -> float:
    return math.nan if value is None else value


def _run_info(row: tuple[Any, ...], now: float) -> RunInfo:
    (run_id, name, scenario, engine, strategy, params, seed, config_hash, config, data, status, error,
     planned, completed, started, finished, run_dir, summary, heartbeat) = row  # fmt: skip
    if status == "running" and now - (heartbeat if heartbeat is not None else started) > LOST_AFTER_S:
        status = "lost"
    damaged: list[str] = []

    def decode(text: str | None, column: str, empty: Any) -> Any:
        """A JSON column; a damaged one (hand-edited, a disk fault) reads as ``empty`` and is named in ``damaged``."""
        if text is None:
            return empty
        try:
            return json.loads(text)
        except (ValueError, RecursionError):
            damaged.append(column)
            return empty

    return RunInfo(
        run_id=run_id, name=name, scenario=scenario, engine=engine, strategy=strategy,
        strategy_params=decode(params, "strategy_params_json", {}), seed=seed, config_hash=config_hash,
        config=decode(config, "config_json", {}), data=decode(data, "data_json", {}), status=status, error=error,
        rounds_planned=planned, rounds_completed=completed, started_at=started, finished_at=finished,
        run_dir=run_dir, summary=decode(summary, "summary_json", None), heartbeat_at=heartbeat,
        damaged=tuple(damaged),
    )  # fmt: skip


# -- JSON ---------------------------------------------------------------------


def _dumps(obj: Any, what: str) -> str:
    try:
        return json.dumps(plain(obj), allow_nan=False)
    except TypeError as exc:
        raise ValueError(f"{what}: {exc}") from None


def _nan_for_null(obj: Any) -> Any:
    """Statistics are numbers: a JSON null (a stored NaN or ±inf) reads back as NaN."""
    if obj is None:
        return math.nan
    if isinstance(obj, dict):
        return {k: _nan_for_null(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_nan_for_null(v) for v in obj]
    return obj
