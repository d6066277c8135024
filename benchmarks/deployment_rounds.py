"""Round time of the fairness profile in Docker Compose vs the same topology as local processes.

    python -m benchmarks.deployment_rounds [--nodes 4] [--rounds 4] [--skip-compose]

Runs, one after the other in one invocation:

1. local: the compose file's fairness topology as processes on loopback, as
   tests/test_deployment_local.py starts it (TLS SuperLink from
   docker-compose.yml's flags, NODES SuperNodes with the profile's
   --node-config, deploy/submit.sh + ``flwr run``), without killing anything;
   as root on cgroup v1, in a cgroup with the CPU weight e2e.sh gives the
   docker cgroup (1024 per service), so that both get the same share of a
   busy host;
2. compose: ``deploy/e2e.sh fairness`` with the same NODES and ROUNDS
   (TERM_FL_E2E_FAIRNESS_NODES / TERM_FL_E2E_ROUNDS).

Prints each round's duration (the results store's ``rounds.duration_s``),
the median after round 1, and the compose / local ratio; then where a round's
time goes in each: the training phase (``configure_train`` to
``aggregate_train`` in the ServerApp's log, as ``flwr run --stream`` shows it
in both), the evaluation phase (``configure_evaluate`` to
``aggregate_evaluate``) and the rest (aggregation, the store, sampling), and
the time from the ServerApp's start to the first ``configure_train``
(discovery). Every process the local part starts is stopped at its end
(SuperNodes before the SuperLink).
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
import threading
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

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


PHASE_MARKS = ("configure_train:", "aggregate_train:", "configure_evaluate:", "aggregate_evaluate:")
SERVERAPP_START = "Start `flwr-serverapp` process"


def phases(lines: list[tuple[float, str]]) -> dict[str, Any]:
    """Per round, the seconds of training and of evaluation from the ServerApp's timestamped log
    lines, and the seconds from the ServerApp's start to the first configure_train."""
    marks: dict[str, list[float]] = {m: [] for m in PHASE_MARKS}
    start = None
    for t, line in lines:
        if SERVERAPP_START in line and start is None:
            start = t
        for m in PHASE_MARKS:
            if m in line and (m != "aggregate_train:" or "valid replies" in line):
                marks[m].append(t)
    n = min(len(v) for v in marks.values())
    train = [marks["aggregate_train:"][i] - marks["configure_train:"][i] for i in range(n)]
    evaluate = [marks["aggregate_evaluate:"][i] - marks["configure_evaluate:"][i] for i in range(n)]
    first = marks["configure_train:"][0] if marks["configure_train:"] else None
    return {"train_s": train, "evaluate_s": evaluate,
            "start_to_first_round_s": None if start is None or first is None else first - start}


def _stamp(stream, out: Path) -> None:
    """Copy a process's output to a file, each line prefixed with the wall-clock time it arrived."""
    with out.open("w") as f:
        for line in iter(stream.readline, ""):
            f.write(f"{time.time():.3f} {line}")
            f.flush()


def _read_stamped(path: Path) -> list[tuple[float, str]]:
    out = []
    for line in path.read_text(errors="replace").splitlines():
        t, _, rest = line.partition(" ")
        try:
            out.append((float(t), rest))
        except ValueError:
            continue
    return out


def _read_compose_log(path: Path, service: str) -> list[tuple[float, str]]:
    """``docker compose logs --timestamps`` lines of one service: (epoch seconds, text)."""
    out = []
    pattern = re.compile(rf"^{re.escape(service)}-\d+\s+\|\s+(\S+)Z (.*)$")
    for line in path.read_text(errors="replace").splitlines():
        m = pattern.match(line)
        if m:
            stamp = m[1][:26]  # microseconds: datetime parses at most 6 fraction digits
            out.append((datetime.fromisoformat(stamp).replace(tzinfo=timezone.utc).timestamp(), m[2]))
    return out


def round_durations(db: Path) -> list[float]:
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        return [d for (d,) in con.execute("SELECT duration_s FROM rounds ORDER BY round")]
    finally:
        con.close()


def _cpu_group(services: int) -> Path | None:
    """A cgroup (v1, root) for the local processes with the CPU weight that deploy/e2e.sh gives the
    docker cgroup (1024 per compose service), so that on a busy host both topologies get the same share
    of the CPU against other work; None where that cannot be made (then the local processes compete as
    plain processes, and the comparison says so)."""
    root = Path("/sys/fs/cgroup/cpu")
    if not (root / "cpu.shares").is_file() or not os.access(root, os.W_OK):
        return None
    group = root / f"term-fl-bench-{os.getpid()}"
    try:
        group.mkdir(exist_ok=True)
        (group / "cpu.shares").write_text(str(1024 * services))
    except OSError:
        return None
    return group


def run_local(nodes: int, rounds: int, work: Path, group: Path | None = None) -> tuple[list[float], dict[str, Any]]:
    import yaml

    services = yaml.safe_load((REPO / "docker-compose.yml").read_text())["services"]
    certs = work / "certs"
    subprocess.run(["bash", str(REPO / "deploy" / "make-certs.sh"), str(certs)], check=True, capture_output=True)
    base_env = {k: v for k, v in os.environ.items() if not k.startswith(("FLWR_", "TERM_FL_"))}
    base_env.update(PATH=f"{BIN}{os.pathsep}{base_env.get('PATH', '')}", FLWR_TELEMETRY_ENABLED="0",
                    FLWR_DISABLE_UPDATE_CHECK="1", FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION="1")
    procs: list[subprocess.Popen] = []

    def start(args: list[str], name: str, stamped: bool = False, **env: str) -> subprocess.Popen:
        log = subprocess.PIPE if stamped else open(work / f"{name}.log", "w")  # noqa: SIM115 (closed with it)
        def join_group() -> None:  # in the child, before exec: it and everything it starts
            if group is not None:
                (group / "cgroup.procs").write_text(str(os.getpid()))

        p = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, start_new_session=True, text=True,
                             env={**base_env, "FLWR_HOME": str(work / f"home-{name}"), **env},
                             preexec_fn=join_group)
        if stamped:
            threading.Thread(target=_stamp, args=(p.stdout, work / f"{name}.log"), daemon=True).start()
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
                     f"run.node_timeout=300 run.rounds={rounds} run.evaluate_every=1 run.executor=sequential")
        results = work / "results"
        cli = start(["sh", str(REPO / "deploy" / "submit.sh"), "flwr", "run", str(REPO), "local", "--stream",
                     "--run-config",
                     f'scenario="configs/fairness.toml" overrides="{overrides}" results-dir="{results}"'],
                    "flwr-run", stamped=True, TERM_FL_SUPERLINK_ADDRESS=f"127.0.0.1:{port}",
                    TERM_FL_CONNECTION="local", TERM_FL_ROOT_CERTIFICATES=str(certs / "ca.crt"))
        if cli.wait(timeout=3600) != 0:
            time.sleep(1)
            raise RuntimeError(f"local run failed:\n{(work / 'flwr-run.log').read_text()[-3000:]}")
        time.sleep(1)  # the stamping thread's last lines
        return round_durations(results / "results.db"), phases(_read_stamped(work / "flwr-run.log"))
    finally:
        for p in reversed(procs):  # SuperNodes and the CLI before the SuperLink
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGTERM)
                try:
                    p.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    os.killpg(p.pid, signal.SIGKILL)
                    p.wait()


def run_compose(nodes: int, rounds: int, work: Path) -> tuple[list[float], dict[str, Any], str]:
    env = {**os.environ, "TERM_FL_E2E_FAIRNESS_NODES": str(nodes), "TERM_FL_E2E_ROUNDS": str(rounds),
           "TERM_FL_E2E_LOG_DIR": str(work), "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"}
    out = subprocess.run(["bash", str(REPO / "deploy" / "e2e.sh"), "fairness"], capture_output=True, text=True,
                         env=env, check=False)
    if out.returncode != 0:
        raise RuntimeError(f"deploy/e2e.sh fairness failed:\n{out.stderr[-4000:]}")
    match = re.search(r"fairness: store ok: (\{.*\})", out.stderr)
    steps = out.stderr[out.stderr.find("e2e step"):]
    return (json.loads(match[1])["round_s"], phases(_read_compose_log(work / "fairness.log", "submit-fairness")),
            steps)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--skip-compose", action="store_true")
    args = parser.parse_args(argv)
    load = [os.getloadavg()[0]]
    services = args.nodes + 3  # as e2e.sh counts them: the SuperNodes, superlink, dashboard, submitter
    group = _cpu_group(services)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            t0 = time.monotonic()
            local, local_phases = run_local(args.nodes, args.rounds, Path(tmp), group)
            t_local = time.monotonic() - t0
    finally:
        if group is not None:
            time.sleep(1)
            try:
                group.rmdir()
            except OSError as exc:
                print(f"could not remove {group}: {exc}", file=sys.stderr)
    load.append(os.getloadavg()[0])
    compose: list[float] = []
    compose_phases: dict[str, Any] = {}
    steps = ""
    if not args.skip_compose:
        with tempfile.TemporaryDirectory() as tmp:
            compose, compose_phases, steps = run_compose(args.nodes, args.rounds, Path(tmp))
        load.append(os.getloadavg()[0])
    print(f"fairness topology, {args.nodes} SuperNodes, TLS, {args.rounds} rounds; load average (1 min) "
          f"{' / '.join(f'{x:.1f}' for x in load)} (start / after local / after compose) on {os.cpu_count()} CPUs")
    where = (f"in a cgroup of CPU weight {1024 * services} ({services} x 1024, as e2e.sh gives the docker cgroup)"
             if group else "plain processes (no cgroup v1 as root)")
    print(f"local processes: {where}")
    for name, values, ph in (("local processes", local, local_phases), ("docker compose", compose, compose_phases)):
        if not values:
            continue
        later = values[1:] or values
        print(f"{name:<16} rounds {', '.join(f'{v:.1f}' for v in values)} s; "
              f"median after round 1 {statistics.median(later):.1f} s")
        if ph.get("train_s"):
            rest = [r - t - e for r, t, e in zip(values, ph["train_s"], ph["evaluate_s"])]
            print(f"{'':<16} train phase {', '.join(f'{v:.1f}' for v in ph['train_s'])} s; "
                  f"evaluate phase {', '.join(f'{v:.1f}' for v in ph['evaluate_s'])} s; "
                  f"rest {', '.join(f'{v:.1f}' for v in rest)} s")
        if ph.get("start_to_first_round_s") is not None:
            print(f"{'':<16} ServerApp start to round 1 (app load, discovery): {ph['start_to_first_round_s']:.1f} s")
    if local and compose:
        ratio = statistics.median(compose[1:] or compose) / statistics.median(local[1:] or local)
        print(f"compose / local round time: {ratio:.2f} (target <= 1.5)")
    print(f"local part: {t_local:.0f} s wall")
    if steps:
        print(steps.rstrip())
    return 0


if __name__ == "__main__":
    sys.exit(main())
