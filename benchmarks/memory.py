"""Peak memory of a process tree (a driver plus every Ray process it started).

A thread polls the tree rooted at ``root_pid`` every ``interval`` seconds and
keeps the maximum of the summed resident set size (RSS) and, where the
kernel offers /proc/PID/smaps_rollup, of the summed proportional set size
(PSS: shared pages split between the processes that map them, so Ray's
shared-memory object store and shared libraries are not counted once per
worker). Uses psutil when installed, else reads /proc (Linux) directly.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

try:  # psutil ships with some Ray installs, not all
    import psutil
except ImportError:  # pragma: no cover - depends on the environment
    psutil = None

PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def _children_map() -> dict[int, list[int]]:
    children: dict[int, list[int]] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            stat = Path(entry.path, "stat").read_text()
        except OSError:
            continue
        # pid (comm) state ppid ...: comm may hold spaces and parentheses
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(ppid, []).append(int(entry.name))
    return children


def tree_pids(root_pid: int) -> list[int]:
    """``root_pid`` and all its descendants."""
    if psutil is not None:
        try:
            proc = psutil.Process(root_pid)
            return [root_pid, *(c.pid for c in proc.children(recursive=True))]
        except psutil.Error:
            return []
    children = _children_map()
    out, todo = [], [root_pid]
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo.extend(children.get(pid, []))
    return out


def _rss(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/statm") as fh:
            return int(fh.read().split()[1]) * PAGE
    except (OSError, ValueError, IndexError):
        return 0


def proc_kib_field(path: str, field: str) -> int | None:
    """Bytes of a 'Field:  N kB' line of a /proc file (None when absent or unreadable)."""
    try:
        with open(path, encoding="utf-8") as fh:
            for line in fh:
                if line.startswith(field):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def _pss(pid: int) -> int | None:
    return proc_kib_field(f"/proc/{pid}/smaps_rollup", "Pss:")


class TreeMemoryPoller:
    """``with TreeMemoryPoller(pid) as poller: ...``; then ``poller.peak_rss`` / ``peak_pss`` (bytes)."""

    def __init__(self, root_pid: int | None = None, interval: float = 0.2) -> None:
        self.root_pid = root_pid or os.getpid()
        self.interval = interval
        self.peak_rss = 0
        self.peak_pss: int | None = None
        self.peak_processes = 0
        self.samples = 0
        self.last_pids: list[int] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="tree-memory-poller", daemon=True)

    def sample(self) -> None:
        pids = tree_pids(self.root_pid)
        self.last_pids = pids
        rss = sum(_rss(p) for p in pids)
        pss_values = [_pss(p) for p in pids]
        self.peak_rss = max(self.peak_rss, rss)
        if pss_values and all(v is not None for v in pss_values):
            pss = sum(pss_values)  # type: ignore[arg-type]
            self.peak_pss = pss if self.peak_pss is None else max(self.peak_pss, pss)
        self.peak_processes = max(self.peak_processes, len(pids))
        self.samples += 1

    def _loop(self) -> None:
        while not self._stop.is_set():
            self.sample()
            self._stop.wait(self.interval)

    def __enter__(self) -> TreeMemoryPoller:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def to_json(self) -> dict[str, int | float | None]:
        return {
            "peak_rss_bytes": self.peak_rss,
            "peak_pss_bytes": self.peak_pss,
            "peak_processes": self.peak_processes,
            "samples": self.samples,
            "interval_s": self.interval,
            "source": "psutil" if psutil is not None else "/proc",
        }
