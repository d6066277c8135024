"""A watchdog that ends the processes a run started when the run itself dies.

Ray ties its core processes (GCS, raylet) to the driver, but its agents
(DashboardAgent, RuntimeEnvAgent, ~185 MB) and idle workers outlive a driver
killed with SIGKILL. :func:`orphan_guard` starts a small process beside the
run that, twice a second, notes every descendant of the run's process (pid
and start time, so a reused pid is never touched). When the run's process
dies without saying goodbye (its parent pid changes: SIGKILL, OOM kill), the
watchdog sends SIGTERM to the noted processes that still exist, then SIGKILL
to those still there after ``GRACE_S``, removes the run's temporary folders
(Ray's session logs), and exits. A run that ends normally tells it to exit
without touching anything.

Only descendants of the run's own process are ever signalled: never a
process found by its name. Linux only (``/proc``); elsewhere the guard does
nothing.
"""

from __future__ import annotations

import os
import select
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

POLL_S = 0.5
STOP = b"stop"
GRACE_S = 3.0
PROC = Path("/proc")


def _stat(pid: int) -> tuple[int, int] | None:
    """(parent pid, start time in clock ticks) of a live process, else None."""
    try:
        text = (PROC / str(pid) / "stat").read_text()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2:].split()  # after "pid (comm) "; comm may hold spaces
    return int(fields[1]), int(fields[19])


def descendants(root: int) -> dict[int, int]:
    """Every live descendant of ``root``: pid -> start time."""
    children: dict[int, list[int]] = {}
    starts: dict[int, int] = {}
    for entry in PROC.iterdir():
        if entry.name.isdigit():
            stat = _stat(int(entry.name))
            if stat is not None:
                children.setdefault(stat[0], []).append(int(entry.name))
                starts[int(entry.name)] = stat[1]
    found: dict[int, int] = {}
    stack = [root]
    while stack:
        for child in children.get(stack.pop(), []):
            if child not in found and child in starts:
                found[child] = starts[child]
                stack.append(child)
    return found


def _still_there(noted: dict[int, int]) -> dict[int, int]:
    alive = {}
    for pid, start in noted.items():
        stat = _stat(pid)
        if stat is not None and stat[1] == start:
            alive[pid] = start
    return alive


def _signal_all(pids: dict[int, int], sig: int) -> None:
    for pid in pids:
        try:
            os.kill(pid, sig)
        except OSError:
            pass


def end_orphans(noted: dict[int, int], grace_s: float = GRACE_S) -> int:
    """SIGTERM the noted processes (and their own descendants), SIGKILL what remains after ``grace_s``."""
    for pid in list(noted):
        noted.update(descendants(pid))
    noted.pop(os.getpid(), None)
    alive = _still_there(noted)
    _signal_all(alive, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while alive and time.monotonic() < deadline:
        time.sleep(0.1)
        alive = _still_there(alive)
    _signal_all(alive, signal.SIGKILL)
    return len(noted)


def watch(parent: int, stop_fd: int = 0, folders: tuple[str, ...] = ()) -> None:
    """The watchdog's loop: note ``parent``'s descendants until it dies (then end them) or says stop."""

    def end_run() -> None:
        end_orphans(noted)
        for folder in folders:
            shutil.rmtree(folder, ignore_errors=True)

    me = os.getpid()
    noted: dict[int, int] = {}
    while True:
        if os.getppid() != parent:  # the run's process died: we were handed to another parent
            end_run()
            return
        ready, _, _ = select.select([stop_fd], [], [], POLL_S)
        if ready:
            message = os.read(stop_fd, 64)
            if STOP in message:  # the run ends normally: it stopped what it started
                return
            if not message:  # the pipe closed without a word: the run's process is gone
                end_run()
                return
        current = descendants(parent)
        current.pop(me, None)
        noted.update(current)
        # forget processes that ended on their own (keeps the table small)
        noted = {pid: start for pid, start in noted.items() if pid in current or _stat(pid) is not None}


class Watchdog:
    """The watchdog process of :func:`orphan_guard`."""

    def __init__(self, folders: tuple[str, ...] = ()) -> None:
        self.keep = False  # set by code that leaves processes for the watchdog to end at exit
        self.proc = subprocess.Popen(
            [sys.executable, str(Path(__file__).resolve()), str(os.getpid()), *folders],  # stdlib only: ~50 ms
            stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
            start_new_session=True,  # outside the run's process group: a Ctrl-C or killpg of the run spares it
        )

    def release(self) -> None:
        """Tell the watchdog the run stopped what it started; it exits without touching anything."""
        try:
            assert self.proc.stdin is not None
            self.proc.stdin.write(STOP)
            self.proc.stdin.close()
            self.proc.wait(timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            self.proc.kill()
            self.proc.wait()


@contextmanager
def orphan_guard(*folders: str | os.PathLike[str]) -> Iterator[Watchdog | None]:
    """Keep a watchdog beside this process while the block runs (see the module docstring).

    ``folders`` (e.g. Ray's temporary folder) are removed if this process dies.

    The block's normal end releases it. Code that cannot finish stopping what
    it started (an abandoned ``ray.shutdown()``) sets ``watchdog.keep = True``
    before leaving: the watchdog then stays until this process exits, and
    ends what is left.
    """
    if not PROC.is_dir() or os.environ.get("TERM_FL_WATCHDOG") == "0":
        yield None
        return
    watchdog = Watchdog(tuple(os.fspath(f) for f in folders))
    try:
        yield watchdog
    finally:
        if not watchdog.keep:
            watchdog.release()


if __name__ == "__main__":
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the run handles Ctrl-C; the watchdog must outlive it
    watch(int(sys.argv[1]), folders=tuple(sys.argv[2:]))
