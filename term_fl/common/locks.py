"""One process at a time per output folder: a lock file that names the process holding it.

A sweep's output folder and a run's folder each hold ``.term-fl.lock`` while
a process works in them. The file is locked with ``flock`` (the kernel
releases the lock when the process ends, however it ends) and holds the
process's id, host, start time and command, so a second copy can say who
holds the folder. A lock file left by a process that is gone is not held:
the next process takes it over. Linux and macOS (``fcntl``).
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

from term_fl.common.errors import ConfigError

__all__ = ["LOCK_FILE", "FolderInUse", "FolderLock", "Holder", "holder_of"]

LOCK_FILE = ".term-fl.lock"


class FolderInUse(ConfigError):
    """Another live process holds the folder's lock; the message names it."""


@dataclass(frozen=True)
class Holder:
    """The process that holds a folder's lock, as its lock file says."""

    pid: int | None
    host: str
    since: float | None
    command: str

    def describe(self) -> str:
        """``pid 1234 on host h since 2026-11-26 18:54:02 UTC (term-fl sweep x.toml)``."""
        words = [f"pid {self.pid}" if self.pid is not None else "a process"]
        if self.host:
            words.append(f"on host {self.host}")
        if self.since is not None:
            words.append("since " + time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(self.since)))
        if self.command:
            words.append(f"({self.command})")
        return " ".join(words)


def _read_holder(fd: int) -> Holder:
    """What the lock file open as ``fd`` says about its holder (fields it lacks stay empty)."""
    try:
        text = os.pread(fd, 4096, 0).decode("utf-8", "replace")
        info = json.loads(text) if text.strip() else {}
    except (OSError, ValueError):
        info = {}
    info = info if isinstance(info, dict) else {}
    pid = info.get("pid")
    since = info.get("since")
    return Holder(pid if isinstance(pid, int) else None, str(info.get("host") or ""),
                  float(since) if isinstance(since, int | float) else None, str(info.get("command") or ""))


def holder_of(folder: str | os.PathLike[str]) -> Holder | None:
    """The live process that holds ``folder``'s lock, or None (no lock file, or one nobody holds)."""
    path = Path(folder) / LOCK_FILE
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return _read_holder(fd)
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    finally:
        os.close(fd)


class FolderLock:
    """The lock of one folder: :meth:`acquire` (or ``with``) or :class:`FolderInUse` naming its holder.

    Parameters
    ----------
    folder
        The folder to lock; it must exist.
    what
        How messages call the folder, e.g. ``"--out /x"`` or ``"the sweep folder /x"``.
    """

    def __init__(self, folder: str | os.PathLike[str], what: str | None = None) -> None:
        self.folder = Path(folder)
        self.what = what or str(self.folder)
        self._fd: int | None = None

    @property
    def path(self) -> Path:
        """The lock file."""
        return self.folder / LOCK_FILE

    def acquire(self) -> FolderLock:
        """Take the lock and write this process into the file; :class:`FolderInUse` when a live process holds it."""
        while True:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = _read_holder(fd)
                os.close(fd)
                raise FolderInUse(
                    f"{self.what} is in use by another term-fl process: {holder.describe()}; wait until it ends, "
                    "or stop it, then run this again"
                ) from None
            except BaseException:
                os.close(fd)
                raise
            # A holder that released and removed the file between our open and our lock: lock the new file
            if self._same_file(fd):
                break
            os.close(fd)
        info = {"pid": os.getpid(), "host": socket.gethostname(), "since": time.time(),
                "command": " ".join(sys.argv)[:300]}
        os.ftruncate(fd, 0)
        os.pwrite(fd, (json.dumps(info) + "\n").encode(), 0)
        self._fd = fd
        return self

    def _same_file(self, fd: int) -> bool:
        try:
            return os.path.samestat(os.fstat(fd), os.stat(self.path))
        except OSError:
            return False

    def release(self) -> None:
        """Remove the lock file and give the lock up (nothing when not held)."""
        fd, self._fd = self._fd, None
        if fd is None:
            return
        try:
            if self._same_file(fd):
                self.path.unlink()
        except OSError:
            pass  # a folder moved or removed meanwhile: the lock ends with the descriptor
        finally:
            os.close(fd)

    @property
    def held(self) -> bool:
        """Whether this object holds the lock."""
        return self._fd is not None

    def __enter__(self) -> FolderLock:
        return self.acquire()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.release()
