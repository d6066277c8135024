"""`flwr run APP local` in tests: a private Flower home and local SuperLink, stopped afterwards.

`flwr run APP local` starts a detached local SuperLink in simulation mode (its
ports from FLWR_LOCAL_SUPERLINK_HTTP_API_PORT / FLWR_LOCAL_CONTROL_API_PORT,
its state in $FLWR_HOME/local-superlink) that keeps running by design. Here
every process started carries a marker in its environment, free ports keep
other users' SuperLinks out of the way, and :meth:`LocalFlower.close` stops
every process with the marker (SIGTERM, then SIGKILL), so a test leaves
nothing running.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

BIN = Path(sys.executable).parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class LocalFlower:
    """Runs `flwr` commands against a private local SuperLink (simulation mode)."""

    def __init__(self, home: Path) -> None:
        self.home = Path(home)
        self.home.mkdir(parents=True, exist_ok=True)
        self.marker = f"TERM_FL_FLWR_LOCAL_TEST={uuid.uuid4().hex}"
        key, value = self.marker.split("=", 1)
        env = {k: v for k, v in os.environ.items() if not k.startswith(("FLWR_", "TERM_FL_"))}
        env.update(
            PATH=f"{BIN}{os.pathsep}{env.get('PATH', '')}",  # flower-superlink, flwr-* of this venv
            FLWR_HOME=str(self.home / "flwr"),
            FLWR_LOCAL_SUPERLINK_HTTP_API_PORT=str(free_port()),
            FLWR_LOCAL_CONTROL_API_PORT=str(free_port()),
            FLWR_TELEMETRY_ENABLED="0",
            FLWR_DISABLE_UPDATE_CHECK="1",
            FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION="1",
            RAY_USAGE_STATS_ENABLED="0",
            PYTHONUNBUFFERED="1",
            **{key: value},
        )
        self.env = env

    def start(self, attempts: int = 3) -> None:
        """Start the local SuperLink (`flwr ls local` starts it), retrying.

        Flower gives a starting SuperLink 15 s to answer and kills it
        otherwise, which a loaded machine can exceed; a later attempt finds
        its imports in the page cache.
        """
        for attempt in range(1, attempts + 1):
            result = subprocess.run(["flwr", "ls", "local", "--format", "json"], env=self.env, cwd=self.home,
                                    stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=120,
                                    check=False)
            if result.returncode == 0:
                return
            if attempt == attempts:
                raise RuntimeError(f"the local SuperLink did not start in {attempts} attempts:\n{result.stdout}")

    def run(self, app: Path, federation_config: str, run_config: str, timeout: float) -> subprocess.CompletedProcess:
        """`flwr run APP local --stream` with these settings; stdout and stderr together."""
        cmd = ["flwr", "run", str(Path(app).resolve()), "local", "--stream",
               "--federation-config", federation_config, "--run-config", run_config]
        return subprocess.run(cmd, env=self.env, cwd=self.home, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True, timeout=timeout, stdin=subprocess.DEVNULL, check=False)

    def runs(self) -> list[dict]:
        """`flwr ls local --format json`: every run of the local SuperLink with its status."""
        out = subprocess.run(["flwr", "ls", "local", "--format", "json"], env=self.env, cwd=self.home,
                             capture_output=True, text=True, timeout=60, check=True).stdout
        return json.loads(out)["runs"]

    def _processes(self) -> list[int]:
        needle = self.marker.encode()
        pids = []
        for entry in Path("/proc").glob("[0-9]*"):
            try:
                if needle in (entry / "environ").read_bytes().split(b"\0"):
                    pids.append(int(entry.name))
            except (OSError, ValueError):
                continue
        return pids

    def close(self) -> None:
        """Stop every process this object started (the SuperLink, its SuperExec, Ray)."""
        for sig, wait_s in ((signal.SIGTERM, 10.0), (signal.SIGKILL, 5.0)):
            for pid in self._processes():
                try:
                    os.kill(pid, sig)
                except ProcessLookupError:
                    pass
            deadline = time.monotonic() + wait_s
            while self._processes() and time.monotonic() < deadline:
                time.sleep(0.2)
