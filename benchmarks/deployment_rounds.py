"""Round time of a deployed federation: Flower's fresh process per message against forked ClientApps.

    python -m benchmarks.deployment_rounds [--nodes 4] [--rounds 4] [--pairs 1] [--where compose,local] [--out FILE]

Runs the fairness profile (NODES SuperNodes, ROUNDS rounds, 2 trained and
every device evaluated per round, TLS and SuperNode authentication) in two
settings, one after the other in one invocation, so that both share the
machine's load:

- ``per-message``, the deployment before term-fl 0.3 (and Flower's own
  defaults): every ClientApp message a fresh ``flwr-clientapp`` process
  (``TERM_FL_PREFORK=0``), Flower's SuperExec asking its SuperNode for a
  message every 1 s (``TERM_FL_SUPEREXEC_POLL_S=1``), the ServerApp asking
  for replies every 3 s (``TERM_FL_REPLY_POLL_S=0``: Flower's own wait);
- ``forked``, the compose files' defaults: ClientApp processes forked from
  ``term-fl-supernode``, which imported torch once; polls every 0.2 s.

The SuperNodes' own poll of the SuperLink (every 3 s when idle, Flower's)
is the same in both. ``--where compose`` runs ``deploy/e2e.sh fairness``
(Docker Compose; as CI does), ``local`` the same topology as local
processes (deploy/local_topology.py; as root on cgroup v1 in a cgroup with
the CPU weight e2e.sh gives the docker cgroup). ``--pairs N`` repeats the
pair, alternating the order (A B B A ...). Prints each round's duration
(the results store's ``rounds.duration_s``), the median after round 1, and
where a round goes: the training phase (``configure_train`` to
``aggregate_train`` in the ServerApp's log), the evaluation phase
(``configure_evaluate`` to ``aggregate_evaluate``) and the rest.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any
from collections.abc import Iterator

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
SETTINGS = {
    "per-message": {"TERM_FL_PREFORK": "0", "TERM_FL_SUPEREXEC_POLL_S": "1", "TERM_FL_REPLY_POLL_S": "0"},
    "forked": {},
}
PHASE_MARKS = ("configure_train:", "aggregate_train:", "configure_evaluate:", "aggregate_evaluate:")
SERVERAPP_START = "Start `flwr-serverapp` process"


def phases(lines: list[tuple[float, str]]) -> dict[str, Any]:
    """Per round, the seconds of training and of evaluation from the ServerApp's timestamped log lines, and the
    seconds from the ServerApp's start to the first configure_train (loading the app, node discovery)."""
    marks: dict[str, list[float]] = {m: [] for m in PHASE_MARKS}
    start = next((t for t, line in lines if SERVERAPP_START in line), None)
    for t, line in lines:
        for m in PHASE_MARKS:
            if m in line and (m != "aggregate_train:" or "valid replies" in line):
                marks[m].append(t)
    n = min(len(v) for v in marks.values())
    first = marks["configure_train:"][0] if marks["configure_train:"] else None
    return {"train_s": [marks["aggregate_train:"][i] - marks["configure_train:"][i] for i in range(n)],
            "evaluate_s": [marks["aggregate_evaluate:"][i] - marks["configure_evaluate:"][i] for i in range(n)],
            "start_to_first_round_s": None if start is None or first is None else first - start}


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


@contextlib.contextmanager
def cpu_group(services: int) -> Iterator[int | None]:
    """This process, and every process it starts, in a cgroup (v1, root) with the CPU weight deploy/e2e.sh gives
    the docker cgroup (1024 per compose service); yields the weight, or None where no such cgroup can be made
    (then the local processes compete as plain processes)."""
    root = Path("/sys/fs/cgroup/cpu")
    group = root / f"term-fl-bench-{os.getpid()}"
    try:
        group.mkdir(exist_ok=True)
        (group / "cpu.shares").write_text(str(1024 * services))
        (group / "cgroup.procs").write_text(str(os.getpid()))
    except OSError:
        yield None
        return
    try:
        yield 1024 * services
    finally:
        (root / "cgroup.procs").write_text(str(os.getpid()))
        time.sleep(1)
        try:
            group.rmdir()
        except OSError as exc:
            print(f"could not remove {group}: {exc}", file=sys.stderr)


def run_local(nodes: int, rounds: int, env: dict[str, str], work: Path) -> dict[str, Any]:
    sys.path.insert(0, str(REPO / "deploy"))
    from local_topology import LocalTopology, read_stamped

    topo = LocalTopology(work, nodes, env=env)
    try:
        topo.up()
        cli = topo.submit(rounds=rounds)
        if cli.wait(timeout=3600) != 0:
            raise RuntimeError(f"local run failed:\n{topo.tail('flwr-run', 60)}")
        time.sleep(1)  # the log's last lines
        return {"rounds_s": round_durations(topo.results / "results.db"),
                **phases(read_stamped(topo.logs["flwr-run"]))}
    finally:
        topo.stop_all()


def run_compose(nodes: int, rounds: int, env: dict[str, str], work: Path) -> dict[str, Any]:
    full = {**os.environ, **env, "TERM_FL_E2E_FAIRNESS_NODES": str(nodes), "TERM_FL_E2E_ROUNDS": str(rounds),
            "TERM_FL_E2E_LOG_DIR": str(work), "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"}
    out = subprocess.run(["bash", str(REPO / "deploy" / "e2e.sh"), "fairness"], capture_output=True, text=True,
                         env=full, check=False)
    if out.returncode != 0:
        raise RuntimeError(f"deploy/e2e.sh fairness failed:\n{out.stderr[-4000:]}")
    match = re.search(r"fairness: store ok: (\{.*\})", out.stderr)
    return {"rounds_s": json.loads(match[1])["round_s"],
            **phases(_read_compose_log(work / "fairness.log", "submit-fairness")),
            "e2e_steps": out.stderr[out.stderr.find("e2e step"):]}


def _order(pairs: int) -> list[str]:
    """A B, B A, A B ...: each pair in turn, so that a drift of the load falls on both settings."""
    names = list(SETTINGS)
    return [name for i in range(pairs) for name in (names if i % 2 == 0 else names[::-1])]


def summarise(results: list[dict[str, Any]]) -> dict[str, float]:
    """Median round after round 1 over every run of a setting, and the medians of its phases."""
    later = [r for res in results for r in (res["rounds_s"][1:] or res["rounds_s"])]
    return {"median_round_s": statistics.median(later),
            "median_train_s": statistics.median(t for res in results for t in res["train_s"]),
            "median_evaluate_s": statistics.median(t for res in results for t in res["evaluate_s"])}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--pairs", type=int, default=1, help="runs of each setting, alternating their order")
    parser.add_argument("--where", default="compose", help="compose, local or compose,local")
    parser.add_argument("--out", type=Path, help="also write every number as JSON here")
    args = parser.parse_args(argv)
    wheres = [w.strip() for w in args.where.split(",") if w.strip()]
    if not wheres or set(wheres) - {"compose", "local"}:
        parser.error(f"--where {args.where!r}: compose, local or both")
    report: dict[str, Any] = {"nodes": args.nodes, "rounds": args.rounds, "cpus": os.cpu_count(),
                              "load_start": os.getloadavg()[0], "runs": []}
    for where in wheres:
        for name in _order(args.pairs):
            with tempfile.TemporaryDirectory() as tmp:
                started = time.monotonic()
                if where == "compose":
                    res, weight = run_compose(args.nodes, args.rounds, SETTINGS[name], Path(tmp)), None
                else:  # + superlink, dashboard and submitter, as e2e.sh counts the services
                    with cpu_group(args.nodes + 3) as weight:
                        res = run_local(args.nodes, args.rounds, SETTINGS[name], Path(tmp))
            res.update(where=where, setting=name, wall_s=time.monotonic() - started, load=os.getloadavg()[0],
                       cgroup_weight=weight)
            report["runs"].append(res)
            print(f"{where:<8} {name:<12} rounds {', '.join(f'{v:.1f}' for v in res['rounds_s'])} s; "
                  f"train {', '.join(f'{v:.1f}' for v in res['train_s'])} s; evaluate "
                  f"{', '.join(f'{v:.1f}' for v in res['evaluate_s'])} s; load {res['load']:.1f}", flush=True)
    for where in wheres:
        sums = {name: summarise([r for r in report["runs"] if (r["where"], r["setting"]) == (where, name)])
                for name in SETTINGS}
        report[f"summary_{where}"] = sums
        before, after = sums["per-message"]["median_round_s"], sums["forked"]["median_round_s"]
        print(f"{where}: median round after round 1: per-message {before:.1f} s, forked {after:.1f} s "
              f"(ratio {after / before:.2f}; target <= 8 s); phases train/evaluate: per-message "
              f"{sums['per-message']['median_train_s']:.1f}/{sums['per-message']['median_evaluate_s']:.1f} s, "
              f"forked {sums['forked']['median_train_s']:.1f}/{sums['forked']['median_evaluate_s']:.1f} s")
    report["load_end"] = os.getloadavg()[0]
    print(f"{args.nodes} SuperNodes, {args.rounds} rounds; load average (1 min) {report['load_start']:.1f} at the "
          f"start, {report['load_end']:.1f} at the end, on {os.cpu_count()} CPUs")
    steps = [r["e2e_steps"] for r in report["runs"] if r.get("e2e_steps")]
    if steps:
        print(steps[-1].rstrip())
    if args.out:
        args.out.write_text(json.dumps(report, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
