"""Benchmark 4: the Flower Simulation Engine with 1,000 and 10,000 virtual clients.

Each point runs in a child process (:mod:`benchmarks.scale_worker`):
Synthetic devices of at most 60 samples, 100 clients sampled per round, 5
rounds, about 100 devices evaluated per round (``run.evaluate_fraction`` =
100 / N). Reported per point: Ray start-up, start-up until the server loop
starts, node discovery (``FederationResult.discovery_s``: waiting for the
nodes, then one query to every node), per-round time (median; round 1 is
dropped when there are 3 or more), and the peak summed RSS (and PSS) of the
whole process tree, the child driver plus every Ray process, polled every
0.2 s. A point that runs past its deadline is stopped; what it reached is
reported, with a stack-sampling profile of the driver's threads.
Targets: 10,000 clients within 4 GiB; per-round time at 10,000 within 1.5x
of that at 1,000 (it should grow with clients sampled, not clients that
exist). --size small: 50 and 200 clients, 10 per round, 2 rounds.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from .common import REPO, BenchResult, Options, Row, fmt_bytes, fmt_s, median, verdict
from .memory import TreeMemoryPoller

NAME = "scale"
MEMORY_TARGET = 4 * 2**30
ROUND_RATIO_TARGET = 1.5
DISPATCHERS = ("flower", "linear")  # Flower 1.42's dispatcher, and term_fl.flower_internals
SIZES = {
    "small": {"clients": [50, 200], "per_round": 10, "evaluated": 10, "rounds": 3,
              "deadline_s": {"flower": [240, 240]},  # small: Flower's dispatcher only (CI time)
              "probe": [(50, 10), (200, 10), (200, 200)]},
    "full": {"clients": [1_000, 10_000], "per_round": 100, "evaluated": 100, "rounds": 5,
             "deadline_s": {"flower": [360, 420], "linear": [300, 420]},
             "probe": [(1_000, 100), (10_000, 100), (1_000, 1_000), (10_000, 10_000)]},
}


def _kill_tree(proc: subprocess.Popen, pids: list[int]) -> None:
    """SIGTERM the child (it writes its profile), then SIGKILL whatever of its tree is left."""
    try:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=15)
    except (subprocess.TimeoutExpired, ProcessLookupError):
        pass
    for pid in pids:
        if pid == os.getpid():
            continue
        try:
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    try:
        proc.wait(timeout=15)
    except subprocess.TimeoutExpired:
        pass


def _events(path: Path) -> list[dict[str, Any]]:
    if not path.is_file():
        return []
    out = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return out


def run_point(num_clients: int, size: dict[str, Any], deadline: float, opts: Options, tmp: Path,
              dispatcher: str = "flower") -> dict[str, Any]:
    progress = tmp / f"progress-{dispatcher}-{num_clients}.jsonl"
    log = tmp / f"worker-{dispatcher}-{num_clients}.log"
    frac = min(1.0, size["evaluated"] / num_clients)
    cmd = [
        sys.executable, "-m", "benchmarks.scale_worker",
        "--num-clients", str(num_clients), "--clients-per-round", str(size["per_round"]),
        "--rounds", str(size["rounds"]), "--evaluate-fraction", repr(frac),
        "--device", opts.device, "--progress", str(progress), "--profile",
        *(["--linear-dispatcher"] if dispatcher == "linear" else []),
    ]
    start = time.perf_counter()
    timed_out = False
    with open(log, "w", encoding="utf-8") as log_fh:
        proc = subprocess.Popen(cmd, cwd=REPO, stdout=log_fh, stderr=subprocess.STDOUT, start_new_session=True)
    with TreeMemoryPoller(proc.pid) as poller:
        try:
            returncode = proc.wait(timeout=deadline)
        except subprocess.TimeoutExpired:
            timed_out = True
            poller.sample()
            _kill_tree(proc, poller.last_pids)
            returncode = proc.returncode
    wall = time.perf_counter() - start
    events = _events(progress)
    first = {e["event"]: e for e in reversed(events)}
    t_sim = first.get("simulation_started", {}).get("t")
    t_server = first.get("server_started", {}).get("t")
    rounds = [e for e in events if e["event"] == "round"]
    round_s = [e["duration_s"] for e in rounds]
    steady = round_s[1:] if len(round_s) >= 2 else round_s  # round 1 warms the actors up
    calls = [e for e in events if e["event"] == "call"]
    query = next((c for c in calls if c["kind"] == "query"), None)
    profile = first.get("profile")
    point = {
        "num_clients": num_clients,
        "dispatcher": dispatcher,
        "clients_per_round": size["per_round"],
        "evaluate_fraction": frac,
        "rounds_planned": size["rounds"],
        "rounds_completed": len(rounds),
        "deadline_s": deadline,
        "timed_out": timed_out,
        "returncode": returncode,
        "wall_s": wall,
        "ray_start_s": first.get("ray_started", {}).get("duration_s"),
        "startup_to_server_s": None if t_sim is None or t_server is None else t_server - t_sim,
        "nodes_connected_at_server_start": first.get("server_started", {}).get("nodes_connected"),
        "discovery_s": first.get("done", {}).get("discovery_s"),
        "discovery_query_s": None if query is None else query["duration_s"],
        "node_wait_s": None if query is None or t_server is None else (
            next(e["t"] for e in events if e["event"] == "call") - query["duration_s"] - t_server),
        "round_s": round_s,
        "round_median_s": median(steady) if steady else None,
        "calls": calls,
        "memory": poller.to_json(),
        "error": first.get("error", {}).get("error"),
        "log_tail": log.read_text(encoding="utf-8", errors="replace")[-3000:] if returncode else "",
        "profile": profile,
        "last_event": events[-1]["event"] if events else None,
        "last_event_t": events[-1]["t"] if events else None,
    }
    return point


def run(opts: Options) -> BenchResult:
    from .linkstate_probe import probe_grid

    size = SIZES[opts.size]
    result = BenchResult(NAME)
    probe = probe_grid(size["probe"])
    points: dict[str, list[dict[str, Any]]] = {}
    with tempfile.TemporaryDirectory(prefix="tfl-bench-scale-", dir=opts.work_dir) as tmp_name:
        for dispatcher in (d for d in DISPATCHERS if d in size["deadline_s"]):
            points[dispatcher] = [
                run_point(n, size, deadline, opts, Path(tmp_name), dispatcher)
                for n, deadline in zip(size["clients"], size["deadline_s"][dispatcher])
            ]
    result.raw = {"points": points, "linkstate_probe": probe, "memory_target_bytes": MEMORY_TARGET,
                  "round_ratio_target": ROUND_RATIO_TARGET}
    for p in probe:
        result.rows.append(
            Row(
                f"{NAME} Flower dispatcher poll, {p['num_nodes']:,} nodes x {p['pending_messages']:,} pending",
                f"one poll {fmt_s(p['one_poll_s'])} ({p['per_check_us']:.1f} us/check)",
                "-", "every 0.1 s; should not grow with nodes", "info",
            )
        )
    for dispatcher, (small, large) in points.items():
        label = "Flower 1.42 dispatcher" if dispatcher == "flower" else "term-fl linear dispatcher (patch dispatcher)"
        for p in (small, large):
            done = f"{p['rounds_completed']}/{p['rounds_planned']} rounds"
            status = f"; STOPPED at {p['deadline_s']:.0f} s in '{_phase(p)}'" if p["timed_out"] else ""
            status += f"; error: {p['error']}" if p["error"] else ""
            result.rows.append(
                Row(
                    f"{NAME} {p['num_clients']:,} clients, {p['clients_per_round']}/round, {label}",
                    f"round {fmt_s(p['round_median_s'])}; startup {fmt_s(p['startup_to_server_s'])}; "
                    f"discovery {fmt_s(p['discovery_s'])}; Ray start {fmt_s(p['ray_start_s'])}; {done}{status}",
                    "-",
                    f"peak RSS {fmt_bytes(p['memory']['peak_rss_bytes'])} (PSS {fmt_bytes(p['memory']['peak_pss_bytes'])})",
                    "info",
                )
            )
        ratio = None
        if small["round_median_s"] and large["round_median_s"]:
            ratio = large["round_median_s"] / small["round_median_s"]
        result.raw[f"round_ratio_{dispatcher}"] = ratio
        mem = large["memory"]["peak_rss_bytes"]
        complete = not large["timed_out"] and large["rounds_completed"] == large["rounds_planned"]
        result.rows.append(
            Row(
                f"{NAME} memory @ {large['num_clients']:,} clients, {label}",
                f"peak RSS {fmt_bytes(mem)}" + ("" if complete else " (run incomplete: peak so far)"),
                "-",
                f"<= {fmt_bytes(MEMORY_TARGET)}",
                verdict(mem <= MEMORY_TARGET) if complete else "n/a",
            )
        )
        result.rows.append(
            Row(
                f"{NAME} round time {large['num_clients']:,} vs {small['num_clients']:,} clients, {label}",
                fmt_s(large["round_median_s"]),
                fmt_s(small["round_median_s"]),
                "-" if ratio is None else f"{ratio:.2f} / <= {ROUND_RATIO_TARGET}",
                verdict(None if ratio is None else ratio <= ROUND_RATIO_TARGET),
            )
        )
    return result


def _phase(point: dict[str, Any]) -> str:
    """Where a stopped run was: the last event, or the discovery query still waiting."""
    last = point["last_event"]
    if last in ("profile", "terminated") and point["discovery_s"] is None and point["rounds_completed"] == 0:
        return "node discovery (query to every node)"
    if last in ("profile", "terminated"):
        return f"round {point['rounds_completed'] + 1}"
    return str(last)
