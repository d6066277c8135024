"""``term-fl-supernode``: ``flower-supernode`` whose ClientApp processes fork from one that imported torch once.

    term-fl-supernode [flower-supernode's arguments]

Flower 1.42's SuperNode runs every message in a fresh ``flwr-clientapp``
process (its SuperExec starts one per message), which imports torch and
term-fl before it can answer. This launcher

1. opens a fork server (:mod:`term_fl.deployment.forkserver`) on a Unix
   socket in a private temporary folder, and writes the shim
   (:mod:`term_fl.deployment.shim`) there as ``flwr-clientapp``;
2. starts ``flower-supernode`` with the given arguments as its child, with
   that folder first on ``PATH`` (so its SuperExec starts the shim);
3. imports torch, term-fl's ClientApp and Flower's ``flwr-clientapp`` once,
   while the SuperNode connects, and then forks a child per message that runs
   Flower's own ``flwr-clientapp`` entry point;
4. forwards SIGTERM, SIGINT and SIGHUP to the SuperNode and exits with its
   status once it has ended, ending any ClientApp still running.

``$TERM_FL_READY_FILE``, when set, is made once the imports are done and
removed at exit: the compose files' health check, so that a run starts only
when its SuperNodes answer without importing torch (23 SuperNodes importing
it at once on 2 cores starved the ServerApp's own start).

Everything Flower does per message is unchanged (task token, the message
pulled from the SuperNode, the FAB, the reply): only the interpreter start
and the imports are gone. ``TERM_FL_PREFORK=0`` runs ``flower-supernode``
itself instead (Flower's fresh process per message).
"""

from __future__ import annotations

import importlib
import os
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from term_fl.deployment import shim
from term_fl.deployment.forkserver import ForkServer

PREFORK_ENV = "TERM_FL_PREFORK"
READY_ENV = "TERM_FL_READY_FILE"  # made once the imports are done (a container's health check), removed at exit
# What every train and evaluate message imports: torch, term-fl's ClientApp (data, models, training) and
# Flower's flwr-clientapp with everything it loads before calling the app.
PRELOAD = (
    "torch",
    "numpy.random",
    "term_fl.clientapp.app",
    "term_fl.clientapp.cache",
    "flwr.supernode.cli",
    "httpx",
)
FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
PASS_THROUGH = {"-h", "--help", "-V", "--version"}  # answered by flower-supernode alone


def preload(modules: Sequence[str] | None = None) -> float:
    """Import ``modules`` (default :data:`PRELOAD`), and what an HTTP client loads when it is made; return the seconds.

    ``flwr-clientapp`` talks to its SuperNode through an ``httpx.Client``,
    whose transport imports httpcore and its backends only when the first
    client is made (0.1-0.2 s per message otherwise). Making one here opens
    no connection and starts no thread.
    """
    start = time.monotonic()
    for name in PRELOAD if modules is None else modules:
        importlib.import_module(name)
    import httpx

    httpx.Client().close()
    return time.monotonic() - start


def write_shim(folder: Path) -> Path:
    """Write the shim as ``folder/flwr-clientapp``, run by this interpreter without site-packages."""
    path = folder / "flwr-clientapp"
    path.write_text(f"#!{sys.executable} -IS\n" + Path(shim.__file__).read_text(encoding="utf-8"), encoding="utf-8")
    path.chmod(0o700)
    return path


def run_flwr_clientapp() -> None:
    """What the ``flwr-clientapp`` command runs (its entry point in Flower's package metadata), in a forked child."""
    from flwr.supernode.cli import flwr_clientapp

    flwr_clientapp()


def _fail(message: str) -> int:
    print(f"term-fl-supernode: error: {message}", file=sys.stderr, flush=True)
    return 2


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``flower-supernode ARGS`` with pre-forked ClientApp processes; return its exit code."""
    args = list(sys.argv[1:] if argv is None else argv)
    if os.environ.get(PREFORK_ENV, "1") == "0" or PASS_THROUGH & set(args):
        os.execvp("flower-supernode", ["flower-supernode", *args])
    supernode, real = shutil.which("flower-supernode"), shutil.which("flwr-clientapp")
    if supernode is None or real is None:
        return _fail("flower-supernode and flwr-clientapp must be on PATH (pip install flwr==1.42.0)")
    ready = Path(os.environ[READY_ENV]) if os.environ.get(READY_ENV) else None
    if ready is not None:
        ready.unlink(missing_ok=True)  # left by a crashed launcher of this container
    with tempfile.TemporaryDirectory(prefix="term-fl-supernode-") as tmp:
        folder = Path(tmp)
        write_shim(folder)
        ended: dict[str, int] = {}
        pid = 0

        def forward(signum: int) -> None:
            os.kill(pid, signum)

        def reap(child: int, status: int) -> None:
            if child == pid:
                ended["status"] = status

        server = ForkServer(folder / "forkserver.sock", run_flwr_clientapp, signals={s: forward for s in FORWARDED})
        server.install_signals()
        env = {
            **os.environ,
            "PATH": f"{folder}{os.pathsep}{os.environ.get('PATH', '')}",
            shim.SOCKET_ENV: str(server.path),
            shim.REAL_ENV: real,
        }
        # The SuperNode connects while torch is imported here; a message that comes first waits in the backlog
        pid = os.posix_spawn(supernode, ["flower-supernode", *args], env)
        try:
            seconds = preload()
        except BaseException:
            os.kill(pid, signal.SIGTERM)
            raise
        print(f"term-fl-supernode: torch and term-fl imported once ({seconds:.1f} s); every ClientApp message runs "
              f"in a process forked from this one (pid {os.getpid()}; {PREFORK_ENV}=0: Flower's fresh process per "
              "message)", file=sys.stderr, flush=True)
        if ready is not None:
            ready.touch()
        try:
            server.serve_until(lambda: "status" in ended, reap)
        finally:
            if "status" not in ended:  # this launcher failed: the SuperNode must not outlive it
                os.kill(pid, signal.SIGTERM)
            server.close()
            if ready is not None:
                ready.unlink(missing_ok=True)
    return shim.exit_code(ended["status"])


if __name__ == "__main__":
    sys.exit(main())
