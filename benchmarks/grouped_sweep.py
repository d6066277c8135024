"""A sweep's cells as one batched computation (``term-fl sweep --group-size``) against the cohort sweep, in one run.

    python -m benchmarks.grouped_sweep [CONFIG] [--seeds 0,1,2] [--rounds N] [--group-size N] [--out DIR]

Runs the scenario's ``[sweep]`` (default configs/fairness.toml, its seeds
restricted to ``--seeds``, its rounds to ``--rounds`` when given) three times
with ``term-fl sweep``'s own code on the in-process engine, in this order:
the cohort executor one cell at a time (fairness.toml's released setting),
the compiled executor one cell at a time, and the compiled executor in
groups of ``--group-size`` cells (default: every cell in one group). Each
sweep gets a fresh store and folder; its wall time and this process's CPU
time are printed with the load average (``os.getloadavg``) before and after.
Then: whether the grouped sweep's comparison.json equals the one-by-one
compiled sweep's (run ids and wall time aside: it must, bit for bit), and
how far its statistics are from the cohort sweep's (another executor:
float32 rounding per step, grown over the rounds; the largest absolute
difference of any cell's mean statistic is printed).

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
SWEEPS = (("cohort, one by one", "cohort", 1), ("compiled, one by one", "compiled", 1), ("compiled, grouped", "compiled", None))


def _comparison(folder: Path) -> dict[str, Any]:
    """comparison.json without what differs run to run (run ids, wall time)."""
    data = json.loads((folder / "comparison.json").read_text())
    data.pop("wall_time_s", None)
    for row in data["cells"]:
        row.pop("run_ids", None)
    return data


def _largest_difference(a: dict[str, Any], b: dict[str, Any]) -> tuple[float, str]:
    """The largest |difference| of a numeric cell value (means and standard errors) between two comparisons."""
    worst, where = 0.0, "-"
    rows_b = {row["cell"]: row for row in b["cells"]}
    for row in a["cells"]:
        other = rows_b.get(row["cell"], {})
        for key, value in row.items():
            if isinstance(value, float) and isinstance(other.get(key), float) and abs(value - other[key]) > worst:
                worst, where = abs(value - other[key]), f"{row['cell']} {key}"
    return worst, where


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("config", nargs="?", default=str(REPO / "configs" / "fairness.toml"))
    parser.add_argument("--seeds", default="0,1,2", help="comma-separated run seeds of the sweep (default 0,1,2)")
    parser.add_argument("--rounds", type=int, help="run.rounds of every cell (default: the file's)")
    parser.add_argument("--group-size", type=int, help="cells per group (default: every cell in one group)")
    parser.add_argument("--out", type=Path, help="folder for the three sweeps (default: a temporary one)")
    args = parser.parse_args(argv)
    seeds = [int(s) for s in args.seeds.split(",")]
    overrides: dict[str, Any] = {"run.rounds": args.rounds} if args.rounds else {}
    logging.getLogger("flwr").setLevel(logging.WARNING)
    console = make_console()
    with tempfile.TemporaryDirectory(prefix="term-fl-grouped-") as tmp:
        base = args.out or Path(tmp)
        times = {}
        for label, executor, group_size in SWEEPS:
            scenario = load_scenario(args.config, {**overrides, "run.executor": executor}, environ={})
            scenario = scenario.model_copy(update={"sweep": {**scenario.sweep, "run.seed": seeds}})
            folder = base / label.replace(", ", "-").replace(" ", "-")
            load_before = os.getloadavg()[0]
            wall, cpu = time.perf_counter(), time.process_time()
            code = run_sweep(scenario, db=folder / "results.db", out_dir=folder, engine="inprocess", console=console,
                             group_size=group_size or 10_000)
            times[label] = (time.perf_counter() - wall, time.process_time() - cpu, load_before, os.getloadavg()[0])
            if code != 0:
                print(f"{label}: the sweep failed (exit code {code})")
                return 1
        print("\nsweep | wall | CPU | load before -> after")
        for label, (wall, cpu, before, after) in times.items():
            print(f"{label} | {wall:.1f} s | {cpu:.1f} s | {before:.1f} -> {after:.1f}")
        cohort, one, grouped = (times[label] for label, _, _ in SWEEPS)
        print(f"grouped vs cohort: {cohort[0] / grouped[0]:.2f}x wall, {cohort[1] / grouped[1]:.2f}x CPU; "
              f"grouped vs compiled one by one: {one[0] / grouped[0]:.2f}x wall, {one[1] / grouped[1]:.2f}x CPU")
        folders = [base / label.replace(", ", "-").replace(" ", "-") for label, _, _ in SWEEPS]
        same = _comparison(folders[2]) == _comparison(folders[1])
        print(f"grouped comparison.json equals the one-by-one compiled sweep's: {same}")
        worst, where = _largest_difference(_comparison(folders[2]), _comparison(folders[0]))
        print(f"largest |difference| from the cohort sweep's comparison: {worst:.3g} ({where})")
        return 0 if same else 1


if __name__ == "__main__":
    raise SystemExit(main())
