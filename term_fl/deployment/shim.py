"""The ``flwr-clientapp`` that Flower's SuperExec starts per message, handing the message to the fork server.

Flower 1.42's SuperExec runs ``flwr-clientapp --runtime-api-address ... --token ...``
(found on ``PATH``) for every message a SuperNode receives. ``term-fl-supernode``
puts a copy of this file first on the SuperNode's ``PATH`` under that name: it
sends its arguments, environment, working directory and standard streams to
the fork server (:mod:`term_fl.deployment.forkserver`), which forks a child
that runs Flower's own ``flwr-clientapp`` entry point with them; this process
waits and exits with the child's status. When the fork server cannot be
reached, it runs the real ``flwr-clientapp`` instead (Flower's per-message
process), so a message is never lost to the launcher.

Standard library only, run as ``python -I -S``: starting it costs an
interpreter without site-packages, not Flower's and torch's imports.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import struct
import sys

SOCKET_ENV = "TERM_FL_FORKSERVER_SOCKET"  # the fork server's Unix socket
REAL_ENV = "TERM_FL_FLWR_CLIENTAPP"  # the real flwr-clientapp, run when the fork server is not there
HEADER = struct.Struct("!i")  # a length, a child's process id, or its status
FORWARDED_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


def encode_request(argv: list[str], env: dict[str, str], cwd: str) -> bytes:
    """One request: its JSON's length, then the JSON of argv, environment and working directory."""
    payload = json.dumps({"argv": argv, "env": env, "cwd": cwd}).encode()
    return HEADER.pack(len(payload)) + payload


def read_exactly(sock: socket.socket, size: int) -> bytes | None:
    """``size`` bytes from ``sock``, or None when it closes first."""
    data = b""
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        if not chunk:
            return None
        data += chunk
    return data


def exit_code(status: int) -> int:
    """A shell's exit code for a child's status (negative: killed by that signal)."""
    return 128 - status if status < 0 else status


def run_real(argv: list[str]) -> None:
    """Replace this process by the real ``flwr-clientapp`` (Flower's per-message process)."""
    real = os.environ.get(REAL_ENV, "")
    if not real:
        sys.exit(f"flwr-clientapp (term-fl shim): no fork server and no {REAL_ENV} to fall back to")
    os.execv(real, [real, *argv[1:]])


def main(argv: list[str] | None = None) -> int:
    """Hand this message's process to the fork server; return the child's exit code."""
    argv = list(sys.argv if argv is None else argv)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect(os.environ[SOCKET_ENV])
        socket.send_fds(sock, [encode_request(argv, dict(os.environ), os.getcwd())], [0, 1, 2])
    except (KeyError, OSError):
        sock.close()
        run_real(argv)
    # The child's process id first: signals sent to this process go on to it
    pid = read_exactly(sock, HEADER.size)
    if pid is None:
        sock.close()
        run_real(argv)
    child = HEADER.unpack(pid)[0]
    for sig in FORWARDED_SIGNALS:
        signal.signal(sig, lambda signum, _frame: os.kill(child, signum))
    status = read_exactly(sock, HEADER.size)
    if status is None:
        print(f"flwr-clientapp (term-fl shim): the fork server closed before child {child} ended", file=sys.stderr)
        return 1
    return exit_code(HEADER.unpack(status)[0])


if __name__ == "__main__":
    sys.exit(main())
