"""A fork server: a process that imported torch and term-fl once forks a child per ClientApp message.

Flower 1.42's SuperNode runs every message in a fresh ``flwr-clientapp``
process, which imports Flower, torch and term-fl, handles one message and
exits: ``import torch`` alone was 89-94% of term-fl's CPU per message
(deploy/README.md). Here a parent that has imported them once listens on a
Unix socket; for each request of the shim (:mod:`term_fl.deployment.shim`)
it forks a child, gives it the shim's standard streams, environment,
working directory and arguments, and runs the entry point in it (Flower's
``flwr-clientapp``). The child starts from the parent's memory as it was
right after the imports, so every message sees the same fresh process state
a new interpreter would have had after them, and nothing one message does
reaches the next.

The server is one thread (a child forked from a process with other threads
can inherit their locks held): it waits in one ``select`` for connections,
for the shim of a running child to go away, and for ``SIGCHLD``.
"""

from __future__ import annotations

import contextlib
import json
import os
import selectors
import signal
import socket
import sys
import time
import traceback
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from term_fl.deployment.shim import HEADER, read_exactly

REQUEST_TIMEOUT_S = 10.0  # a shim sends its whole request at once
MAX_REQUEST_BYTES = 4 << 20


@dataclass(frozen=True)
class Request:
    """What a child runs with: the shim's arguments, environment and working directory."""

    argv: list[str]
    env: dict[str, str]
    cwd: str


def receive_request(conn: socket.socket) -> tuple[Request, list[int]]:
    """Read one request and the three file descriptors (stdin, stdout, stderr) sent with it."""
    conn.settimeout(REQUEST_TIMEOUT_S)
    head, fds, _, _ = socket.recv_fds(conn, HEADER.size, 3)
    try:
        if len(head) < HEADER.size:
            head += read_exactly(conn, HEADER.size - len(head)) or b""
        size = HEADER.unpack(head)[0] if len(head) == HEADER.size else -1
        if not 0 < size <= MAX_REQUEST_BYTES or len(fds) != 3:
            raise ValueError(f"malformed request: length {size}, {len(fds)} file descriptors (3 expected)")
        body = read_exactly(conn, size)
        if body is None:
            raise ValueError("the request ended early")
        data = json.loads(body)
        return Request(list(data["argv"]), dict(data["env"]), str(data["cwd"])), fds
    except BaseException:
        for fd in fds:
            os.close(fd)
        raise


def status_of(wait_status: int) -> int:
    """A child's status as subprocess reports it: the exit code, or -N when signal N ended it."""
    return os.waitstatus_to_exitcode(wait_status)


class ForkServer:
    """Listen on ``path``; run ``entry`` in a child forked per request; report each child's status.

    Parameters
    ----------
    path
        The Unix socket to listen on (its folder should be private to this user).
    entry
        What a child runs, with ``sys.argv``, ``os.environ`` and the working
        directory of the request; ``SystemExit`` gives the child's exit code.
    """

    def __init__(
        self, path: Path, entry: Callable[[], object], signals: Mapping[int, Callable[[int], None]] | None = None
    ) -> None:
        self.path = Path(path)
        self.entry = entry
        self.handlers = dict(signals or {})  # called in the loop, never inside a signal handler
        self.children: dict[int, socket.socket] = {}  # child pid -> the connection of its shim
        self.pending: list[int] = []
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(str(self.path))
        self.listener.listen(64)
        self.selector = selectors.DefaultSelector()
        self.selector.register(self.listener, selectors.EVENT_READ)
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_w, False)
        self.selector.register(self._wake_r, selectors.EVENT_READ)

    def install_signals(self) -> None:
        """From now on ``SIGCHLD`` and the signals of ``signals`` are noted and handled in the loop."""
        signal.set_wakeup_fd(self._wake_w, warn_on_full_buffer=False)
        for sig in (signal.SIGCHLD, *self.handlers):
            signal.signal(sig, lambda signum, _frame: self.pending.append(signum))

    def serve_until(self, finished: Callable[[], bool], reap: Callable[[int, int], None]) -> None:
        """Answer requests until ``finished()``; ``reap(pid, status)`` hears of children not forked here.

        ``SIGCHLD`` and the signals of ``signals`` wake the loop; their handlers
        run here, between requests.
        """
        self.install_signals()
        while not finished():
            for key, _ in self.selector.select(timeout=1.0):
                if key.fileobj is self.listener:
                    self._accept()
                elif key.fileobj == self._wake_r:
                    os.read(self._wake_r, 512)
                else:
                    self._shim_gone(key.fileobj)
            signums, self.pending[:] = list(self.pending), []
            for signum in signums:
                if signum in self.handlers:
                    self.handlers[signum](signum)
            self._reap(reap)

    def _accept(self) -> None:
        conn, _ = self.listener.accept()
        try:
            request, fds = receive_request(conn)
        except (OSError, ValueError, KeyError, TypeError) as exc:
            print(f"term-fl fork server: refused a request: {exc}", file=sys.stderr, flush=True)
            conn.close()
            return
        sys.stdout.flush()
        sys.stderr.flush()
        try:
            pid = os.fork()
        except OSError as exc:  # no memory or process slot: the shim runs Flower's own process instead
            print(f"term-fl fork server: fork failed: {exc}", file=sys.stderr, flush=True)
            pid = -1
        if pid == 0:
            self._run_child(request, fds, conn)
        for fd in fds:
            os.close(fd)
        if pid < 0:
            conn.close()
            return
        conn.settimeout(None)
        self.children[pid] = conn
        self.selector.register(conn, selectors.EVENT_READ)
        try:
            conn.sendall(HEADER.pack(pid))
        except OSError:  # the shim is gone already: its child is ended like any orphan of a shim
            self._shim_gone(conn)

    def _run_child(self, request: Request, fds: list[int], conn: socket.socket) -> None:
        """In the child: the request's streams, environment and arguments, then the entry point; never returns."""
        code = 1
        try:
            signal.set_wakeup_fd(-1)
            for sig in (signal.SIGCHLD, signal.SIGTERM, signal.SIGHUP, *self.handlers):
                signal.signal(sig, signal.SIG_DFL)
            signal.signal(signal.SIGINT, signal.default_int_handler)
            self.selector.close()
            for sock in (self.listener, conn, *self.children.values()):
                sock.close()
            os.close(self._wake_r)
            os.close(self._wake_w)
            for target, fd in zip((0, 1, 2), fds):
                if fd != target:
                    os.dup2(fd, target)
                    os.close(fd)
            os.chdir(request.cwd)
            os.environ.clear()
            os.environ.update(request.env)
            sys.argv = list(request.argv)
            self.entry()
            code = 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        except BaseException:  # noqa: BLE001 (a child reports every failure, as a process would)
            traceback.print_exc()
        finally:
            for stream in (sys.stdout, sys.stderr):
                try:
                    stream.flush()
                except (OSError, ValueError):
                    pass
            os._exit(code)

    def _shim_gone(self, conn: socket.socket) -> None:
        """A shim closed before its child ended (it was killed): end the child too."""
        try:
            if conn.recv(1):
                return
        except OSError:
            pass
        for pid, c in self.children.items():
            if c is conn:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGTERM)
        with contextlib.suppress(KeyError, ValueError):  # no longer watched; closed once its child is reaped
            self.selector.unregister(conn)

    def _reap(self, reap: Callable[[int, int], None]) -> None:
        """Collect every ended child: report a forked one's status to its shim, others to ``reap``."""
        while True:
            try:
                pid, wait_status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            conn = self.children.pop(pid, None)
            if conn is None:
                reap(pid, status_of(wait_status))
                continue
            try:
                conn.sendall(HEADER.pack(status_of(wait_status)))
            except OSError:
                pass  # its shim is gone
            self._close(conn)

    def _close(self, conn: socket.socket) -> None:
        with contextlib.suppress(KeyError, ValueError):
            self.selector.unregister(conn)
        conn.close()

    def close(self, grace_s: float = 5.0) -> None:
        """End the children still running (SIGTERM, then SIGKILL after ``grace_s``), tell their shims, stop listening."""
        for pid in list(self.children):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
        for pid, status in _wait_children(list(self.children), grace_s).items():
            conn = self.children.pop(pid)
            try:
                conn.sendall(HEADER.pack(status))
            except OSError:
                pass  # its shim is gone
            conn.close()
        self.selector.close()
        self.listener.close()
        os.close(self._wake_r)
        os.close(self._wake_w)
        self.path.unlink(missing_ok=True)


def _wait_children(pids: list[int], grace_s: float) -> dict[int, int]:
    """Wait up to ``grace_s`` for ``pids`` to end, then SIGKILL those left; return each one's status."""
    deadline = time.monotonic() + grace_s
    statuses: dict[int, int] = {}
    left = set(pids)
    while left:
        for pid in list(left):
            if time.monotonic() >= deadline:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            try:
                done, wait_status = os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                done, wait_status = pid, 0
            if done:
                statuses[pid] = status_of(wait_status)
                left.discard(pid)
        time.sleep(0.02)
    return statuses
