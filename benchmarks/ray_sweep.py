"""A sweep's cells as Ray tasks (``term-fl sweep --parallel N``): the speedup of N workers against one, in one run.

    python -m benchmarks.ray_sweep [CONFIG] [--seeds 0,1,2] [--rounds N] [--workers N] [--out DIR]

Runs the scenario's ``[sweep]`` (default configs/fairness.toml, its seeds
restricted to ``--seeds``, its rounds set to ``--rounds``, default 400) three
times with ``term-fl sweep``'s own code on the in-process engine, in this
order: every cell one after another in this process (no Ray, the reference),
as Ray tasks with one worker (``--parallel 1``), and with ``--workers``
workers (``--parallel N``, default 2). Each Ray sweep starts its own private
Ray instance (its start is in its time) and each sweep gets a fresh store and
folder. Prints one table: wall time, this process's CPU time (the driver:
with Ray, it records every round in the store), a run's mean wall time
(longer when runs side by side find no free core), speedup against one Ray worker and
against the sweep without Ray, and the load average (``os.getloadavg``)
before and after each sweep; then whether every sweep's comparison.json
equals the reference's (run ids and wall time aside: it must, bit for bit).

On a machine shared with other work the speedup is bounded by the cores
left free: with 2 cores and nothing else running, expect up to about 2x.
Not part of ``python -m benchmarks``: it runs a sweep three times.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import tempfile
import time
from pathlib import Path
from typing import Any

from term_fl.cli.console import make_console
from term_fl.cli.sweep import run_sweep
from term_fl.config import load_scenario

REPO = Path(__file__).resolve().parents[1]


def _comparison(folder: Path) -> dict[str, Any]:
    """comparison.json without what differs run to run (run ids, wall time)."""
    data = json.loads((folder / "comparison.json").read_text())
    data.pop("wall_time_s", None)
    for rows in (data["cells"], data.get("selection_cells") or []):
        for row in rows:
            row.pop("run_ids", None)
    return data


def _folder(label: str) -> str:
    return label.replace(", ", "-").replace(" ", "-")


def _mean_run_s(folder: Path) -> float:
    """The mean wall time of the sweep's runs (summary.json's ``wall_time_s``: first round's start to the end)."""
    walls = [json.loads(path.read_text())["wall_time_s"] for path in folder.glob("*/summary.json")]
    return sum(walls) / len(walls)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("config", nargs="?", default=str(REPO / "configs" / "fairness.toml"))
    parser.add_argument("--seeds", default="0,1,2", help="comma-separated run seeds of the sweep (default 0,1,2)")
    parser.add_argument("--rounds", type=int, default=400, help="run.rounds of every cell (default 400)")
    parser.add_argument("--workers", type=int, default=2, help="Ray workers of the parallel sweep (default 2)")
    parser.add_argument("--out", type=Path, help="folder for the three sweeps (default: a temporary one)")
    args = parser.parse_args(argv)
    if args.workers < 1:
        parser.error(f"--workers must be at least 1, got {args.workers}")
    seeds = [int(s) for s in args.seeds.split(",")]
    logging.getLogger("flwr").setLevel(logging.WARNING)
    console = make_console()
    sweeps = (("one by one, no Ray", None), ("Ray, 1 worker", 1), (f"Ray, {args.workers} workers", args.workers))
    scenario = load_scenario(args.config, {"run.rounds": args.rounds}, environ={})
    scenario = scenario.model_copy(update={"sweep": {**scenario.sweep, "run.seed": seeds}})
    with tempfile.TemporaryDirectory(prefix="term-fl-ray-sweep-") as tmp:
        base = args.out or Path(tmp)
        times: dict[str, tuple[float, float, float, float]] = {}
        for label, parallel in sweeps:
            folder = base / _folder(label)
            load_before = os.getloadavg()[0]
            wall, cpu = time.perf_counter(), time.process_time()
            code = run_sweep(scenario, db=folder / "results.db", out_dir=folder, engine="inprocess", console=console,
                             parallel=parallel)
            times[label] = (time.perf_counter() - wall, time.process_time() - cpu, load_before, os.getloadavg()[0])
            if code != 0:
                print(f"{label}: the sweep failed (exit code {code})")
                return 1
        runs = len(list((base / _folder(sweeps[0][0])).glob("*/summary.json")))
        print(f"\n{scenario.name}: seeds {args.seeds}, {args.rounds} rounds, {runs} runs; {os.cpu_count()} cores")
        print("sweep | wall | driver CPU | a run, mean | speedup vs 1 Ray worker | vs no Ray | load before -> after")
        one = times[sweeps[1][0]][0]
        reference = times[sweeps[0][0]][0]
        for label, (wall, cpu, before, after) in times.items():
            print(f"{label} | {wall:.1f} s | {cpu:.1f} s | {_mean_run_s(base / _folder(label)):.2f} s | "
                  f"{one / wall:.2f}x | {reference / wall:.2f}x | {before:.1f} -> {after:.1f}")
        folders = [base / _folder(label) for label, _ in sweeps]
        same = all(_comparison(folder) == _comparison(folders[0]) for folder in folders[1:])
        print(f"every sweep's comparison.json equals the one without Ray: {same}")
        return 0 if same else 1


if __name__ == "__main__":
    raise SystemExit(main())
