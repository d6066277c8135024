#!/usr/bin/env python3
"""The compose file's fairness topology as local processes on loopback (no Docker engine needed).

    python deploy/local_topology.py [--nodes 4] [--rounds 3] [--work DIR]   # one run, by hand

Starts what docker-compose.yml's ``fairness`` profile starts, with the same
flags (from deploy/gen_compose.py, which writes that file; paths and
addresses made local): certificates (deploy/make-certs.sh), a key pair per
SuperNode (deploy/supernode_keys.py generate) registered with the SuperLink
(supernode_keys.py register, as the ``register-supernodes`` service does), a
TLS SuperLink with SuperNode authentication on a free port, SuperNodes
(``term-fl-supernode``) with the profile's ``--node-config`` and their own
runtime ports, and the submitter (deploy/submit.sh + ``flwr run``).

tests/test_deployment_local.py, tests/test_deployment_auth.py and
benchmarks/deployment_rounds.py use :class:`LocalTopology`. Every process it
starts is stopped by :meth:`LocalTopology.stop_all` (the submitter and the
SuperNodes before the SuperLink; SIGTERM, then SIGKILL), and processes that
left their process group are found by a marker in their environment.
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import IO

sys.path.insert(0, str(Path(__file__).resolve().parent))
import gen_compose as gen  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
CONNECTION = "local"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _stamp(stream: IO[bytes], path: Path) -> None:
    """Copy a process's output to ``path``, each line after the wall-clock time it arrived."""
    with path.open("wb") as out:
        for line in iter(stream.readline, b""):
            out.write(f"{time.time():.3f} ".encode() + line)
            out.flush()


def read_stamped(path: Path) -> list[tuple[float, str]]:
    """The lines of a stamped log: (wall-clock time, text)."""
    out = []
    for line in path.read_text(errors="replace").splitlines():
        stamp, _, rest = line.partition(" ")
        try:
            out.append((float(stamp), rest))
        except ValueError:
            continue
    return out


def interpolate(text: str, environ: dict[str, str]) -> str:
    """Compose's ``${VAR:-default}`` and ``${VAR}`` in ``text``, from ``environ``."""
    return re.sub(r"\$\{(\w+)(?::-([^}]*))?\}", lambda m: environ.get(m[1]) or (m[2] or ""), text)


class LocalTopology:
    """The fairness profile's processes on loopback, in the folder ``work``.

    Parameters
    ----------
    work
        A folder of its own: certificates, keys, logs, Flower homes, results.
    nodes
        The federation's devices (SuperNodes).
    env
        Extra environment for every process (e.g. ``TERM_FL_PREFORK=0``).
    """

    def __init__(self, work: Path, nodes: int, env: dict[str, str] | None = None) -> None:
        self.work = Path(work)
        self.nodes = nodes
        self.extra = dict(env or {})
        self.marker = uuid.uuid4().hex
        self.port = free_port()
        self.certs = self.work / "certs"
        self.keys = self.work / "keys"
        self.results = self.work / "results"
        self.supernodes: dict[int, subprocess.Popen] = {}
        self.superlinks: list[subprocess.Popen] = []
        self.clis: list[subprocess.Popen] = []
        self.logs: dict[str, Path] = {}

    # -- processes -------------------------------------------------------------------------------------

    def env(self, name: str, **extra: str) -> dict[str, str]:
        """A process's environment: this venv first on PATH, Flower quiet, its own FLWR_HOME, the marker."""
        env = {k: v for k, v in os.environ.items() if not k.startswith(("FLWR_", "TERM_FL_"))}
        env.update(PATH=f"{BIN}{os.pathsep}{env.get('PATH', '')}", FLWR_HOME=str(self.work / f"home-{name}"),
                   FLWR_TELEMETRY_ENABLED="0", FLWR_DISABLE_UPDATE_CHECK="1",
                   FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION="1", RAY_USAGE_STATS_ENABLED="0",
                   PYTHONUNBUFFERED="1", TERM_FL_LOCAL_TOPOLOGY=self.marker)
        env.update(self.extra)
        env.update(extra)
        return env

    def start(self, group: list[subprocess.Popen] | None, name: str, cmd: list[str],
              env: dict[str, str]) -> subprocess.Popen:
        """Start ``cmd`` in a session of its own; its output goes to ``work/NAME.log``, each line after the
        wall-clock time it arrived (``1764180000.123 text``)."""
        log = self.work / f"{name}.log"
        self.logs[name] = log
        proc = subprocess.Popen(cmd, env=env, cwd=self.work, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True)
        threading.Thread(target=_stamp, args=(proc.stdout, log), daemon=True).start()
        if group is not None:
            group.append(proc)
        return proc

    def _local(self, args: list[str], key: Path | None = None) -> list[str]:
        """Compose paths -> local ones: secrets -> the certificates (and ``key`` for the SuperNode's key)."""
        out = []
        for a in args:
            if a == f"{gen.SECRETS_DIR}/{gen.NODE_KEY}":
                a = str(key) if key is not None else a
            elif a.startswith(gen.SECRETS_DIR + "/"):
                a = str(self.certs / a[len(gen.SECRETS_DIR) + 1:])
            out.append(a)
        return out

    def make_certs(self) -> None:
        self.work.mkdir(parents=True, exist_ok=True)
        subprocess.run(["bash", str(REPO / "deploy" / "make-certs.sh"), str(self.certs)], check=True,
                       capture_output=True, timeout=120)

    def start_superlink(self) -> subprocess.Popen:
        """The compose file's SuperLink command, on 127.0.0.1 and a free port."""
        cmd = self._local(gen.superlink_command())
        cmd[cmd.index("--host") + 1] = "127.0.0.1"
        cmd[cmd.index("--port") + 1] = str(self.port)
        env = self.env("superlink", **{k: interpolate(v, self.extra) for k, v in gen.SUPERLINK_ENV.items()})
        return self.start(self.superlinks, "superlink", [str(BIN / cmd[0]), *cmd[1:]], env)

    def node_name(self, partition: int) -> str:
        return f"fairness-supernode-{partition}"

    def generate_keys(self, names: list[str]) -> None:
        subprocess.run([sys.executable, str(REPO / "deploy" / "supernode_keys.py"), "generate", str(self.keys),
                        *names], check=True, capture_output=True, timeout=120)

    def connection_env(self, name: str) -> dict[str, str]:
        """deploy/submit.sh's settings for a one-shot that talks to this SuperLink."""
        return self.env(name, TERM_FL_SUPERLINK_ADDRESS=f"127.0.0.1:{self.port}", TERM_FL_CONNECTION=CONNECTION,
                        TERM_FL_ROOT_CERTIFICATES=str(self.certs / "ca.crt"), TERM_FL_WAIT_TIMEOUT="60")

    def register(self, folder: Path | None = None) -> subprocess.CompletedProcess:
        """Register every public key of ``folder`` (default: the topology's keys) as register-supernodes does."""
        cmd = ["sh", str(REPO / "deploy" / "submit.sh"), *self._register_args(folder or self.keys)]
        return subprocess.run(cmd, env=self.connection_env("register"), cwd=self.work, capture_output=True,
                              text=True, timeout=300, check=False)

    @staticmethod
    def _register_args(folder: Path) -> list[str]:
        cmd = gen.register_command()[1:]  # after deploy/submit.sh
        cmd[cmd.index(gen.KEYS_MOUNT)] = str(folder)
        cmd[cmd.index(gen.CONNECTION)] = CONNECTION
        return [sys.executable if c == "python" else str(REPO / "deploy" / Path(c).name) if c.endswith(".py") else c
                for c in cmd]

    def start_supernode(self, partition: int, key: Path | None = None) -> subprocess.Popen:
        """SuperNode ``partition`` as in compose (its own key by default), with a runtime port of its own."""
        name = self.node_name(partition)
        cmd = self._local([*gen.supernode_entrypoint(superlink=f"127.0.0.1:{self.port}"),
                           *gen.supernode_args(partition, self.nodes)], key or self.keys / name)
        cmd = [str(BIN / cmd[0]), *cmd[1:], "--host", "127.0.0.1", "--port", str(free_port())]
        env = self.env(name, **{k: interpolate(v, self.extra) for k, v in gen.SUPERNODE_ENV.items()})
        env["TERM_FL_READY_FILE"] = str(self.work / f"{name}.ready")  # one per SuperNode of this host
        proc = self.start(None, name, cmd, env)
        self.supernodes[partition] = proc
        return proc

    def submit(self, overrides: str = "", rounds: int = 2) -> subprocess.Popen:
        """The fairness profile's submitter for ``rounds`` rounds, ``overrides`` appended to the profile's."""
        profile = next(p for p in gen.profiles(self.nodes) if p.name == "fairness")
        base = interpolate(profile.run_overrides, {"TERM_FL_ROUNDS": str(rounds)})
        run_config = gen.run_config(profile, overrides=f"{base} {overrides}".strip(), results_dir=str(self.results))
        cmd = ["sh", str(REPO / "deploy" / "submit.sh"), "flwr", "run", str(REPO), CONNECTION, "--stream",
               "--run-config", run_config]
        return self.start(self.clis, "flwr-run", cmd, self.connection_env("flwr-run"))

    def up(self) -> None:
        """Certificates, keys, SuperLink, registration, and every SuperNode."""
        self.make_certs()
        self.generate_keys([self.node_name(i) for i in range(self.nodes)])
        self.start_superlink()
        registered = self.register()
        if registered.returncode != 0:
            raise RuntimeError(f"registering the SuperNode keys failed:\n{registered.stdout}{registered.stderr}"
                               f"\n{self.tail('superlink')}")
        for i in range(self.nodes):
            self.start_supernode(i)

    # -- stopping --------------------------------------------------------------------------------------

    @staticmethod
    def signal_group(proc: subprocess.Popen, sig: int) -> None:
        try:
            os.killpg(proc.pid, sig)  # the group of a child started here (a session of its own)
        except ProcessLookupError:
            pass

    def stop(self, proc: subprocess.Popen, timeout: float = 10.0) -> None:
        self.signal_group(proc, signal.SIGTERM)
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            pass
        self.signal_group(proc, signal.SIGKILL)  # and whatever the leader left in its group
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass

    def stop_all(self) -> None:
        """The submitters, then the SuperNodes, then the SuperLink; then every straggler with the marker."""
        for proc in self.clis:
            self.stop(proc, timeout=5)
        for proc in self.supernodes.values():
            self.stop(proc)
        for proc in self.superlinks:
            self.stop(proc)
        needle = f"TERM_FL_LOCAL_TOPOLOGY={self.marker}".encode()
        for entry in Path("/proc").glob("[0-9]*"):
            try:
                if needle in (entry / "environ").read_bytes().split(b"\0"):
                    os.kill(int(entry.name), signal.SIGKILL)
            except (OSError, ValueError):
                continue

    def tail(self, name: str, lines: int = 40) -> str:
        path = self.logs.get(name)
        if path is None or not path.exists():
            return f"[{name}: no log]"
        text = path.read_text(errors="replace").splitlines()[-lines:]
        return f"--- {name} (last {len(text)} lines) ---\n" + "\n".join(text)

    def tails(self) -> str:
        return "\n".join(self.tail(name) for name in self.logs)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--overrides", default="", help="more dotted overrides for the run")
    parser.add_argument("--work", type=Path, default=Path("local-topology"))
    args = parser.parse_args(argv)
    topo = LocalTopology(args.work.resolve(), args.nodes)
    try:
        topo.up()
        cli = topo.submit(args.overrides, rounds=args.rounds)
        code = cli.wait()
        time.sleep(0.5)  # the log's last lines
        print(topo.tail("flwr-run", 20))
        print(f"results: {topo.results / 'results.db'} (flwr run exit status {code}); logs in {topo.work}")
        return code
    finally:
        topo.stop_all()


if __name__ == "__main__":
    sys.exit(main())
