"""`flwr run APP` in Flower's Simulation Engine from tests: a private Flower home and SuperLink, stopped afterwards.

`flwr run APP local` starts a detached SuperLink in simulation mode on fixed
ports and restarts it whenever a 0.4 s health probe fails, which a loaded
machine can miss (a second SuperLink then dies on the taken port). Here the
test starts that SuperLink itself, with the options `local` uses
(`--simulation --isolation subprocess`), on free ports, and names it in the
private Flower home's config.toml; `flwr run APP test --federation-config ...`
then runs the same Simulation Engine. Every process started carries a marker
in its environment, and :meth:`LocalFlower.close` stops them all (SIGTERM,
then SIGKILL), so a test leaves nothing running.
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
CONNECTION = "test"
START_S = 180.0  # how long the SuperLink may take to answer on a loaded machine
RAY_START_TIMED_OUT = "The current node timed out during startup"  # ray/_private/node.py, a fixed 30 s
RAY_START_TRIES = 3


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class LocalFlower:
    """Runs `flwr` commands against a private SuperLink in simulation mode."""

    def __init__(self, home: Path) -> None:
        self.home = Path(home)
        self.home.mkdir(parents=True, exist_ok=True)
        self.marker = f"TERM_FL_FLWR_LOCAL_TEST={uuid.uuid4().hex}"
        key, value = self.marker.split("=", 1)
        env = {k: v for k, v in os.environ.items() if not k.startswith(("FLWR_", "TERM_FL_"))}
        env.pop("PYTHONPATH", None)  # the apps import what their FAB and this venv hold, nothing else
        env.update(
            PATH=f"{BIN}{os.pathsep}{env.get('PATH', '')}",  # flower-superlink, flwr-* of this venv
            FLWR_HOME=str(self.home / "flwr"),
            FLWR_TELEMETRY_ENABLED="0",
            FLWR_DISABLE_UPDATE_CHECK="1",
            FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION="1",
            RAY_USAGE_STATS_ENABLED="0",
            PYTHONUNBUFFERED="1",
            **{key: value},
        )
        self.env = env
        self.port, self.control_port = free_port(), free_port()
        self.superlink: subprocess.Popen | None = None
        self.log = self.home / "superlink.log"

    def start(self) -> None:
        """Start the SuperLink and wait (up to START_S) until `flwr ls` reaches it."""
        flwr_home = self.home / "flwr"
        flwr_home.mkdir(parents=True, exist_ok=True)
        (flwr_home / "config.toml").write_text(
            f'[superlink]\ndefault = "{CONNECTION}"\n\n[superlink.{CONNECTION}]\n'
            f'address = "127.0.0.1:{self.port}"\ninsecure = true\n'
        )
        cmd = ["flower-superlink", "--insecure", "--simulation", "--isolation", "subprocess",
               "--control-api-address", f"127.0.0.1:{self.control_port}", "--host", "127.0.0.1",
               "--port", str(self.port), "--database", str(self.home / "state.db")]
        with open(self.log, "wb") as out:
            self.superlink = subprocess.Popen(cmd, env=self.env, cwd=self.home, stdout=out, stderr=subprocess.STDOUT,
                                              stdin=subprocess.DEVNULL, start_new_session=True)
        deadline = time.monotonic() + START_S
        while True:
            if self.superlink.poll() is not None:
                raise RuntimeError(f"flower-superlink exited with {self.superlink.returncode}:\n{self.log.read_text()}")
            try:
                self.runs()
                return
            except (subprocess.CalledProcessError, subprocess.TimeoutExpired, ValueError):
                if time.monotonic() > deadline:
                    raise RuntimeError(f"flower-superlink did not answer within {START_S:g} s:\n"
                                       f"{self.log.read_text()}") from None
                time.sleep(1.0)

    def run(self, app: Path, federation_config: str, run_config: str, timeout: float) -> subprocess.CompletedProcess:
        """`flwr run APP --stream` in the Simulation Engine with these settings; stdout and stderr together.

        A run whose Ray node did not register within Ray's fixed 30 s
        (RAY_START_TIMED_OUT: a machine loaded far beyond its cores; nothing
        of the app has run yet) is started again, at most RAY_START_TRIES
        times in all; any other outcome is returned as it is.
        """
        cmd = ["flwr", "run", str(Path(app).resolve()), CONNECTION, "--stream",
               "--federation-config", federation_config, "--run-config", run_config]
        for _ in range(RAY_START_TRIES):
            result = subprocess.run(cmd, env=self.env, cwd=self.home, stdout=subprocess.PIPE,
                                    stderr=subprocess.STDOUT, text=True, timeout=timeout, stdin=subprocess.DEVNULL,
                                    check=False)
            if RAY_START_TIMED_OUT not in result.stdout:
                break
            print(f"\nflwr_local: Ray's node did not start within 30 s (machine overloaded); running {app} again")
        return result

    def runs(self) -> list[dict]:
        """`flwr ls --format json`: every run of the SuperLink with its status."""
        out = subprocess.run(["flwr", "ls", CONNECTION, "--format", "json"], env=self.env, cwd=self.home,
                             capture_output=True, text=True, timeout=60, check=True).stdout
        answer = json.loads(out)
        if not answer.get("success"):
            raise ValueError(f"flwr ls: {answer.get('error-message')}")
        return answer["runs"]

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
        """Stop every process this object started (the SuperLink, its SuperExec, the simulation, Ray)."""
        for sig, wait_s in ((signal.SIGTERM, 10.0), (signal.SIGKILL, 5.0)):
            for pid in self._processes():
                try:
                    os.kill(pid, sig)
                except ProcessLookupError:
                    pass
            deadline = time.monotonic() + wait_s
            while self._processes() and time.monotonic() < deadline:
                time.sleep(0.2)
        if self.superlink is not None:
            try:
                self.superlink.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass
