"""Does ``run.executor = "cohort"`` reproduce a sweep? Paired per-seed differences against the sequential executor.

    python -m benchmarks.cohort_equivalence configs/vehicle-sensor.toml [--set KEY=VALUE ...] [--out DIR]
    python -m benchmarks.cohort_equivalence --compare SEQUENTIAL_DIR COHORT_DIR

The first form runs the scenario's ``[sweep]`` twice with ``term-fl sweep``'s
own code on the in-process engine, sequential executor first, and reports
each sweep's wall time; both forms then pair the runs of the two sweep
folders by cell and seed and print, per cell and statistic of the last round
(test: device mean, pooled mean, worst 10%, best 10%, std; validation:
device mean, pooled mean, worst 10%), the mean paired difference
(cohort - sequential) over seeds, its standard error, how many standard
errors it is from zero, and the largest difference of any seed; and per run
how far the final global models are apart (max |difference| / max |weight|).

The two executors agree to float32 rounding per step (tests/test_cohort.py);
over 100 rounds such differences can grow (a different sample near a
decision boundary, a different TERM weight), so the check is statistical:
the mean paired difference of a statistic should lie within 2 standard
errors of zero. With n seeds the 2-SE band holds about 88% (n = 5) or 82%
(n = 3) of such means when nothing but noise separates the executors (t
distribution), so a few of many (cell, statistic) pairs land outside by
chance; the summary counts them.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

STATS = (
    ("test", "mean"), ("test", "pooled_mean"), ("test", "worst_10"), ("test", "best_10"), ("test", "std"),
    ("validation", "mean"), ("validation", "pooled_mean"), ("validation", "worst_10"),
)
EXECUTORS = ("sequential", "cohort")


def _runs(folder: Path) -> dict[str, dict[str, Any]]:
    """Finished runs of a sweep folder by cell folder name."""
    out = {}
    for path in sorted(folder.glob("*/summary.json")):
        summary = json.loads(path.read_text())
        if summary.get("status") == "finished":
            out[path.parent.name] = summary
    return out


def _cell(name: str) -> str:
    """A run folder's cell without its seed: ``term_t=1_seed=0`` (0.2.0) or
    ``strategy.name=term_strategy.t=1.0_run.seed=0`` (before) -> ``term_t=1`` / ``strategy.name=term_strategy.t=1.0``."""
    return re.sub(r"(^|_)(run\.)?seed=[^_]*", "", name).strip("_") or "base"


def _model_gap(a: Path, b: Path) -> float | None:
    """max |w_b - w_a| / max |w_a| over the final global models of two run folders."""
    import torch

    if not ((a / "model.pt").is_file() and (b / "model.pt").is_file()):
        return None
    wa, wb = (torch.load(p / "model.pt", weights_only=True) for p in (a, b))
    diff = max(float((wb[k] - wa[k]).abs().max()) for k in wa)
    scale = max(float(wa[k].abs().max()) for k in wa)
    return diff / scale if scale > 0 else diff


def compare(sequential: Path, cohort: Path) -> dict[str, Any]:
    """Paired per-seed differences (cohort - sequential) of the last round's statistics, per cell."""
    runs_a, runs_b = _runs(sequential), _runs(cohort)
    shared = sorted(set(runs_a) & set(runs_b))
    if not shared:
        raise SystemExit(f"no finished run appears in both {sequential} and {cohort}")
    cells: dict[str, list[str]] = {}
    for name in shared:
        cells.setdefault(_cell(name), []).append(name)
    rows = []
    for cell, names in cells.items():
        for split, stat in STATS:
            d = np.array([runs_b[n][split][stat] - runs_a[n][split][stat] for n in names], dtype=np.float64)
            mean = float(d.mean())
            se = float(d.std(ddof=1) / math.sqrt(len(d))) if len(d) > 1 else float("nan")
            if not d.any():
                verdict = "identical"
            elif len(d) < 2:
                verdict = "one seed"
            else:
                verdict = "within 2 SE" if abs(mean) <= 2 * se else "outside 2 SE"
            rows.append({
                "cell": cell, "statistic": f"{split}.{stat}", "seeds": len(d), "mean_diff": mean, "se": se,
                "z": mean / se if se > 0 else 0.0, "max_abs_diff": float(np.abs(d).max()),
                "sequential_mean": float(np.mean([runs_a[n][split][stat] for n in names])),
                "verdict": verdict,
            })
    gaps = {n: _model_gap(sequential / n, cohort / n) for n in shared}
    outside = [r for r in rows if r["verdict"] == "outside 2 SE"]
    return {
        "sequential": str(sequential), "cohort": str(cohort), "runs_paired": len(shared), "rows": rows,
        "outside_2se": len(outside), "pairs": len(rows),
        "largest_abs_diff": max(rows, key=lambda r: r["max_abs_diff"]),
        "largest_z": max(rows, key=lambda r: abs(r["z"])),
        "final_model_gap": {"max": max((g for g in gaps.values() if g is not None), default=None),
                            "median": float(np.median([g for g in gaps.values() if g is not None])) if gaps else None},
    }


def print_report(report: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title="cohort - sequential, last round, paired over seeds (mean ± SE; largest |diff| of a seed)")
    for col in ("cell", "statistic", "seeds", "sequential", "mean diff ± SE", "z", "max |diff|", "verdict"):
        table.add_column(col, justify="left" if col in ("cell", "statistic", "verdict") else "right")
    for r in report["rows"]:
        table.add_row(r["cell"], r["statistic"], str(r["seeds"]), f"{r['sequential_mean']:.4f}",
                      f"{r['mean_diff']:+.4f} ± {r['se']:.4f}", f"{r['z']:+.2f}", f"{r['max_abs_diff']:.4f}",
                      r["verdict"])
    console = Console(width=170)
    console.print(table)
    big, z = report["largest_abs_diff"], report["largest_z"]
    gap = report["final_model_gap"]
    console.print(
        f"{report['runs_paired']} runs paired; {report['outside_2se']} of {report['pairs']} (cell, statistic) "
        f"means outside 2 SE; largest |diff| of one seed {big['max_abs_diff']:.4f} ({big['cell']}, "
        f"{big['statistic']}); largest |z| {abs(z['z']):.2f} ({z['cell']}, {z['statistic']}); final global "
        f"models apart by max {gap['max']:.2e}, median {gap['median']:.2e} (relative)"
    )


def run_both(config: Path, overrides: list[str], out: Path) -> dict[str, float]:
    """Run the scenario's sweep with each executor (term-fl sweep's code, in-process engine); wall times."""
    from term_fl.config import load_scenario
    from term_fl.cli.console import make_console, route_logs
    from term_fl.cli.sweep import run_sweep

    route_logs(make_console(), verbose=False)  # as `term-fl sweep` without -v
    walls = {}
    for executor in EXECUTORS:
        scenario = load_scenario(config, [*overrides, f"run.executor={executor}"])
        start = time.perf_counter()
        status = run_sweep(scenario, db=out / f"{executor}.db", out_dir=out / executor, engine="inprocess")
        walls[executor] = time.perf_counter() - start
        if status != 0:
            raise SystemExit(f"the {executor} sweep had failed cells (exit status {status})")
    return walls


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.cohort_equivalence", description=__doc__.split("\n\n")[0])
    parser.add_argument("config", nargs="?", type=Path, help="scenario TOML with a [sweep] table")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--out", type=Path, default=Path("runs/cohort-equivalence"), help="folder for both sweeps")
    parser.add_argument("--compare", nargs=2, type=Path, metavar=("SEQUENTIAL_DIR", "COHORT_DIR"))
    args = parser.parse_args(argv)
    if (args.config is None) == (args.compare is None):
        parser.error("give either a scenario file or --compare SEQUENTIAL_DIR COHORT_DIR")
    walls = None
    if args.compare:
        sequential, cohort = args.compare
    else:
        out = args.out.resolve()
        walls = run_both(args.config, args.overrides, out)
        sequential, cohort = out / "sequential", out / "cohort"
    report = compare(sequential, cohort)
    if walls is not None:
        report["sweep_wall_s"] = walls
        print(f"sweep wall time: sequential {walls['sequential']:.1f} s, cohort {walls['cohort']:.1f} s "
              f"({walls['sequential'] / walls['cohort']:.1f}x)")
    print_report(report)
    (cohort.parent / "equivalence.json").write_text(json.dumps(report, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
