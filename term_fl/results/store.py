"""The :class:`ResultsStore`: opening a store (creating, checking or migrating its schema), transactions."""

from __future__ import annotations

import logging
import os
import sqlite3
import threading
import time
from collections.abc import Callable
from pathlib import Path

from . import schema
from .errors import RunNotFound, StoreError
from .reads import Reads
from .schema import _SCHEMA, APPLICATION_ID, MIGRATIONS, READABLE_VERSIONS, SCHEMA_VERSION
from .writes import Writes, new_run_id

__all__ = ["ResultsStore", "new_run_id"]

log = logging.getLogger("term_fl")


def _is_busy(exc: sqlite3.OperationalError) -> bool:
    text = str(exc)
    return "locked" in text or "busy" in text


class ResultsStore(Writes, Reads):
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
                self._conn = sqlite3.connect(uri, uri=True, timeout=schema.BUSY_POLL_S, isolation_level=None, check_same_thread=False)
            else:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                self._conn = sqlite3.connect(self.path, timeout=schema.BUSY_POLL_S, isolation_level=None, check_same_thread=False)
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
        self._conn.execute(f"PRAGMA busy_timeout = {int(schema.BUSY_TIMEOUT_S * 1000)}")

    def _open_schema(self) -> None:
        self._conn.execute("PRAGMA foreign_keys = ON")
        if self.readonly:
            self._check_schema()
        else:
            self._conn.execute("PRAGMA journal_mode = WAL")
            self._conn.execute("PRAGMA synchronous = NORMAL")
            self._create_or_check_schema()

    def _wait_while_busy(self, action: Callable[[], None]) -> None:
        """Run ``action``, waiting up to schema.BUSY_TIMEOUT_S while another connection locks the file.

        A busy store is not a broken one: a reader with an open transaction
        (or another writer) holds a lock; say so once, wait, and name the
        cause if it does not go away.
        """
        deadline = time.monotonic() + schema.BUSY_TIMEOUT_S
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
                        f"{schema.BUSY_TIMEOUT_S:g} s (a reader with an open transaction, or another writer); the file "
                        "is not damaged: try again once that connection is closed"
                    ) from exc
                if not told:
                    told = True
                    log.warning("waiting for the results database %s: another connection holds a lock on it "
                                "(up to %g s)", self.path, schema.BUSY_TIMEOUT_S)

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
            for step in MIGRATIONS[version]:
                if isinstance(step, str):
                    self._conn.execute(step)
                else:
                    step(self._conn)
            version += 1
            self._conn.execute(f"PRAGMA user_version = {version}")
        if version != start:
            log.info("results store %s: schema migrated from version %d to %d", self.path, start, version)

    def writing(self) -> bool:
        """Whether a transaction is open on this store's connection (a signal handler must not start another)."""
        return self._conn.in_transaction

    def _transaction(self) -> _Transaction:
        return _Transaction(self._conn, self._lock, self._begin)

    def _begin(self) -> None:
        """``BEGIN IMMEDIATE``, waiting (and saying so once) while another connection holds the write lock.

        Each try waits schema.BUSY_POLL_S, so that a wait is said within
        seconds (a run's round would otherwise stall in silence), up to
        schema.BUSY_TIMEOUT_S in all (:meth:`_wait_while_busy`).
        """
        self._conn.execute(f"PRAGMA busy_timeout = {int(schema.BUSY_POLL_S * 1000)}")
        try:
            self._wait_while_busy(lambda: self._conn.execute("BEGIN IMMEDIATE"))
        finally:
            self._conn.execute(f"PRAGMA busy_timeout = {int(schema.BUSY_TIMEOUT_S * 1000)}")

    def _writable(self) -> None:
        if self.readonly:
            raise StoreError(f"{self.path} was opened read-only; open it with ResultsStore(path) to write")

    def _require_status(self, run_id: str, expected: str, action: str) -> None:
        row = self._conn.execute("SELECT status FROM runs WHERE run_id = ?", (run_id,)).fetchone()
        if row is None:
            raise self._not_found(run_id)
        if row[0] != expected:
            raise StoreError(f"cannot {action} of run {run_id!r}: the run is {row[0]}, not {expected}")

    def _not_found(self, run_id: str) -> RunNotFound:
        return RunNotFound(f"no run {run_id!r} in {self.path}")


class _Transaction:
    """``BEGIN IMMEDIATE`` (``begin``) ... ``COMMIT``, or ``ROLLBACK`` on any exception, under the store's lock."""

    def __init__(self, conn: sqlite3.Connection, lock: threading.RLock, begin: Callable[[], None]) -> None:
        self._conn, self._lock, self._begin = conn, lock, begin

    def __enter__(self) -> None:
        self._lock.acquire()
        try:
            self._begin()
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
