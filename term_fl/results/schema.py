"""The store's tables, their version, and the migrations that bring an older store to it.

Every change of the schema takes the next version number and adds a
migration from the previous version to :data:`MIGRATIONS`, tested on a store
that the previous version wrote (tests/data/results_v*.sql).
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable

from term_fl.common.keys import EVAL_SPLITS

SCHEMA_VERSION = 4
READABLE_VERSIONS = (1, 2, 3, 4)  # read-only opening reads these as they are
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
STAT_COLUMNS = ("mean", "pooled_mean", "worst_10", "best_10", "std")  # round_stats columns since version 1
RISK_COLUMNS = ("var", "cvar", "evar", "tivar")  # round_stats columns since schema version 4
STATS_COLUMNS_SINCE: dict[int, tuple[str, ...]] = {1: STAT_COLUMNS, 4: RISK_COLUMNS}
"""The statistics with a round_stats column of their own, by the schema version that added them.

Every statistic is in ``stats_json``; a column makes SQL read it without
parsing JSON (the per-round sums of a comparison). To give one a column:
its key here under the next version, that ``SCHEMA_VERSION`` (and
``READABLE_VERSIONS``), and ``MIGRATIONS[version - 1] =
_stats_columns_added(version)``; writes and reads follow this table.
Columns added after version 1 mirror the JSON: a non-finite value is NULL.
"""
ADDED_STATS_COLUMNS = tuple(c for v, cols in sorted(STATS_COLUMNS_SINCE.items()) if v > 1 for c in cols)


def stats_columns(version: int = SCHEMA_VERSION) -> tuple[str, ...]:
    """The statistics that have a round_stats column in a store of schema ``version``."""
    return tuple(c for v, cols in sorted(STATS_COLUMNS_SINCE.items()) if v <= version for c in cols)

TRAIN_COLUMNS = ("sampled", "included", "train_loss", "train_loss_after", "tilted_weight", "num_examples")
EVAL_COLUMNS = ("loss", "accuracy", "correct", "examples")


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


# the columns added after version 1, after stats_json (where ALTER TABLE puts them in a migrated store)
_ADDED_STATS_SQL = f"\n        {', '.join(f'{c} REAL' for c in ADDED_STATS_COLUMNS)}," if ADDED_STATS_COLUMNS else ""

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
        num_sampled INTEGER NOT NULL,
        num_included INTEGER NOT NULL,
        duration_s REAL,
        excluded_json TEXT NOT NULL,
        diagnostics_json TEXT NOT NULL DEFAULT '{{}}',
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
        stats_json TEXT NOT NULL,{_ADDED_STATS_SQL}
        PRIMARY KEY (run_id, round, split),
        FOREIGN KEY (run_id, round) REFERENCES rounds (run_id, round)
            ON DELETE CASCADE
    ) WITHOUT ROWID""",
)

INSERT_ROUND_STATS = (
    f"INSERT INTO round_stats (run_id, round, split, {', '.join((*STAT_COLUMNS, 'stats_json', *ADDED_STATS_COLUMNS))}) "
    f"VALUES ({', '.join('?' * (4 + len(STAT_COLUMNS) + len(ADDED_STATS_COLUMNS)))})"
)

_RUN_COLUMNS = (
    "run_id, name, scenario, engine, strategy, strategy_params_json, seed, config_hash, config_json, "
    "data_json, status, error, rounds_planned, rounds_completed, started_at, finished_at, run_dir, "
    "summary_json, {heartbeat}"
)


def _diagnostics_replace_running_estimate(conn: sqlite3.Connection) -> None:
    """Version 2 -> 3: TERM's running estimate moves from its own column into ``diagnostics_json``.

    In Python, not with SQLite's json_object, which prints a REAL with 15
    significant digits: every digit of the stored estimate is kept.
    """
    conn.execute("ALTER TABLE rounds ADD COLUMN diagnostics_json TEXT NOT NULL DEFAULT '{}'")
    rows = conn.execute("SELECT run_id, round, running_estimate FROM rounds WHERE running_estimate IS NOT NULL")
    conn.executemany(
        "UPDATE rounds SET diagnostics_json = ? WHERE run_id = ? AND round = ?",
        [(json.dumps({"running_estimate": value}, allow_nan=False), run_id, r) for run_id, r, value in rows.fetchall()],
    )
    conn.execute("ALTER TABLE rounds DROP COLUMN running_estimate")


Step = str | Callable[[sqlite3.Connection], None]


def _stats_columns_added(version: int) -> tuple[Step, ...]:
    """Version - 1 -> version: the round_stats columns ``version`` adds, filled from the stored JSON.

    A row whose JSON is damaged keeps NULL; a comparison's per-round curves
    then read columns instead of parsing every row.
    """
    added = STATS_COLUMNS_SINCE[version]
    return (
        *(f"ALTER TABLE round_stats ADD COLUMN {c} REAL" for c in added),
        "UPDATE round_stats SET " + ", ".join(
            f"{c} = CASE WHEN json_valid(stats_json) THEN json_extract(stats_json, '$.{c}') END" for c in added
        ),
    )


MIGRATIONS: dict[int, tuple[Step, ...]] = {
    1: ("ALTER TABLE runs ADD COLUMN heartbeat_at REAL",),
    2: (_diagnostics_replace_running_estimate,),
    3: _stats_columns_added(4),  # the loss risks
}
"""The steps (SQL statements or functions of the connection) that bring a store of version v to v + 1.

The store runs them in one transaction with the version update, so a
migration is done completely or not at all.
"""
