"""Round time of the fairness profile in Docker Compose vs the same topology as local processes.

    python -m benchmarks.deployment_rounds [--nodes 4] [--rounds 4] [--skip-compose]

Runs, one after the other in one invocation:

1. local: the compose file's fairness topology as processes on loopback, as
   tests/test_deployment_local.py starts it (TLS SuperLink from
   docker-compose.yml's flags, NODES SuperNodes with the profile's
   --node-config, deploy/submit.sh + ``flwr run``), without killing anything;
2. compose: ``deploy/e2e.sh fairness`` with the same NODES and ROUNDS
   (TERM_FL_E2E_FAIRNESS_NODES / TERM_FL_E2E_ROUNDS).

Prints each round's duration (the results store's ``rounds.duration_s``),
the median after round 1, and the compose / local ratio. Every process the
local part starts is stopped at its end (SuperNodes before the SuperLink).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import socket
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
SECRETS = "/run/secrets/"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _argv(service: dict) -> list[str]:
    return [*(service.get("entrypoint") or []), *(service.get("command") or [])]


def _local(args: list[str], certs: Path, replace: dict[str, str]) -> list[str]:
    out = []
    for a in args:
        a = replace.get(a, a)
        out.append(str(certs / a[len(SECRETS):]) if a.startswith(SECRETS) else a)
    return out


def _set(args: list[str], flag: str, value: str) -> list[str]:
    if flag in args:
        args = list(args)
        args[args.index(flag) + 1] = value
        return args
    return [*args, flag, value]


def round_durations(db: Path) -> list[float]:
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        return [d for (d,) in con.execute("SELECT duration_s FROM rounds ORDER BY round")]
    finally:
        con.close()


def run_local(nodes: int, rounds: int, work: Path) -> list[float]:
    import yaml

    services = yaml.safe_load((REPO / "docker-compose.yml").read_text())["services"]
    certs = work / "certs"
    subprocess.run(["bash", str(REPO / "deploy" / "make-certs.sh"), str(certs)], check=True, capture_output=True)
    base_env = {k: v for k, v in os.environ.items() if not k.startswith(("FLWR_", "TERM_FL_"))}
    base_env.update(PATH=f"{BIN}{os.pathsep}{base_env.get('PATH', '')}", FLWR_TELEMETRY_ENABLED="0",
                    FLWR_DISABLE_UPDATE_CHECK="1", FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION="1")
    procs: list[subprocess.Popen] = []

    def start(args: list[str], name: str, **env: str) -> subprocess.Popen:
        log = open(work / f"{name}.log", "w")  # noqa: SIM115 (closed with the process)
        p = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                             env={**base_env, "FLWR_HOME": str(work / f"home-{name}"), **env})
        procs.append(p)
        return p

    port = _free_port()
    link = _set(_set(_local(_argv(services["superlink"]), certs, {}), "--host", "127.0.0.1"), "--port", str(port))
    start([str(BIN / link[0]), *link[1:]], "superlink")
    try:
        for pid in range(nodes):
            args = _local(_argv(services[f"fairness-supernode-{pid}"]), certs,
                          {"superlink:8000": f"127.0.0.1:{port}"})
            args = _set(args, "--node-config", f"partition-id={pid} num-partitions={nodes}")
            start([str(BIN / args[0]), *args[1:], "--host", "127.0.0.1", "--port", str(_free_port())], f"node{pid}")
        overrides = (f"data.num_devices={nodes} run.clients_per_round={max(1, nodes // 2)} "
                     f"run.node_timeout=300 run.rounds={rounds}")
        results = work / "results"
        cli = start(["sh", str(REPO / "deploy" / "submit.sh"), "flwr", "run", str(REPO), "local", "--stream",
                     "--run-config",
                     f'scenario="configs/fairness.toml" overrides="{overrides}" results-dir="{results}"'],
                    "flwr-run", TERM_FL_SUPERLINK_ADDRESS=f"127.0.0.1:{port}", TERM_FL_CONNECTION="local",
                    TERM_FL_ROOT_CERTIFICATES=str(certs / "ca.crt"))
        if cli.wait(timeout=3600) != 0:
            raise RuntimeError(f"local run failed:\n{(work / 'flwr-run.log').read_text()[-3000:]}")
        return round_durations(results / "results.db")
    finally:
        for p in reversed(procs):  # SuperNodes and the CLI before the SuperLink
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGTERM)
                try:
                    p.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    os.killpg(p.pid, signal.SIGKILL)
                    p.wait()


def run_compose(nodes: int, rounds: int) -> list[float]:
    env = {**os.environ, "TERM_FL_E2E_FAIRNESS_NODES": str(nodes), "TERM_FL_E2E_ROUNDS": str(rounds),
           "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"}
    out = subprocess.run(["bash", str(REPO / "deploy" / "e2e.sh"), "fairness"], capture_output=True, text=True,
                         env=env, check=False)
    if out.returncode != 0:
        raise RuntimeError(f"deploy/e2e.sh fairness failed:\n{out.stderr[-4000:]}")
    match = re.search(r"fairness: store ok: (\{.*\})", out.stderr)
    return json.loads(match[1])["round_s"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--skip-compose", action="store_true")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.monotonic()
        local = run_local(args.nodes, args.rounds, Path(tmp))
        t_local = time.monotonic() - t0
    compose: list[float] = []
    if not args.skip_compose:
        compose = run_compose(args.nodes, args.rounds)
    print(f"fairness topology, {args.nodes} SuperNodes, TLS, {args.rounds} rounds; "
          f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    for name, values in (("local processes", local), ("docker compose", compose)):
        if values:
            later = values[1:] or values
            print(f"{name:<16} rounds {', '.join(f'{v:.1f}' for v in values)} s; "
                  f"median after round 1 {statistics.median(later):.1f} s")
    if local and compose:
        ratio = statistics.median(compose[1:] or compose) / statistics.median(local[1:] or local)
        print(f"compose / local round time: {ratio:.2f} (target <= 1.5)")
    print(f"local part: {t_local:.0f} s wall")
    return 0


if __name__ == "__main__":
    sys.exit(main())
