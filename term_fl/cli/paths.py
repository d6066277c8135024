"""Where the command line reads and writes: the results store (``--db``, ``$TERM_FL_DB``) and ``--out``."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from term_fl.common.errors import ConfigError

__all__ = ["DB_HELP", "DEFAULT_DB_ENV", "MAX_COUNT", "PORTS", "RUNS_TABLE_LIMIT", "default_db", "output_dir",
           "store_path"]

DEFAULT_DB_ENV = "TERM_FL_DB"
DB_HELP = f"results database (default: ${DEFAULT_DB_ENV} or ./runs/results.db)"
RUNS_TABLE_LIMIT = 50  # `term-fl runs` shows the newest 50 in its table, like the dashboard's runs page
MAX_COUNT = 2**63 - 1  # the largest count SQLite (and so --limit) takes
PORTS = range(1, 65536)


def default_db() -> Path:
    return Path(os.environ.get(DEFAULT_DB_ENV, "runs/results.db")).expanduser().resolve()


def store_path(args: argparse.Namespace) -> Path:
    """The results database the command names (--db, $TERM_FL_DB, ./runs/results.db), checked to be a file path."""
    db = (args.db or default_db()).expanduser().resolve()
    if db.is_dir():
        raise ConfigError(f"--db {db}: is a directory; give the path of a results database file, e.g. {db / 'results.db'}")
    if db.exists() and not db.is_file():  # /dev/null, a pipe: SQLite would wait for a lock that never comes
        raise ConfigError(f"--db {db}: is not a regular file ({_file_kind(db)}); give the path of a results database "
                          "file, e.g. runs/results.db")
    return db


def _file_kind(path: Path) -> str:
    kinds = ((Path.is_char_device, "a character device"), (Path.is_block_device, "a block device"),
             (Path.is_fifo, "a named pipe"), (Path.is_socket, "a socket"))
    return next((word for test, word in kinds if test(path)), "not a file")


def output_dir(args: argparse.Namespace) -> Path | None:
    """--out, checked to be a directory or a path where one can be made."""
    if args.out is None:
        return None
    if not args.out.strip():
        raise ConfigError("--out '': empty; give a directory for the run's files (or leave --out out: a new folder "
                          "under ./runs/)")
    out = Path(args.out).expanduser().resolve()
    if out.exists() and not out.is_dir():
        raise ConfigError(f"--out {out}: is a file, not a directory; give a directory for the run's files")
    return out
