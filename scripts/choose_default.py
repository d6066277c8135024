"""Apply the declared rule of docs/default-choice.md to the candidates' sweeps (validation split only).

    python scripts/choose_default.py runs/candidates      # one folder per candidate: C1 ... C6 (+ C1.db ...)

Reads each run's validation statistics from the candidate's results store
(each run's last ``tail`` evaluations, then the seeds) and its FedAvg
(uniform) runs' convergence from summary.json; never reads the test split.
Prints the validation table and the chosen candidate and t.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

from term_fl.comparison.convergence import tail_means
from term_fl.results import ResultsStore

TAIL = 5
MAX_MEAN_DROP = 0.02
FLAT = 0.01
TIE = 0.005
TS = (1.0, 3.0, 10.0)


def cell_of(summary: dict) -> str:
    """'fedavg', 'uniform' (TERM t = 0 with uniform base weights: FedAvg (uniform)) or 'term t=T'."""
    strategy = summary["strategy"]
    if strategy["name"] in ("fedavg", "fedavg_uniform"):
        return "uniform" if strategy["name"] == "fedavg_uniform" else "fedavg"
    if strategy["name"] == "term" and strategy.get("t") == 0.0 and strategy.get("base_weighting") == "uniform":
        return "uniform"
    return f"term t={strategy['t']:g}"


def candidate_runs(folder: Path, db: Path) -> dict[str, dict[int, dict]]:
    """cell -> seed -> {'val': validation tail statistics, 'change': last-fifth change of the val device mean}."""
    store = ResultsStore.open_readonly(db)
    cells: dict[str, dict[int, dict]] = {}
    for path in sorted(folder.glob("*/summary.json")):
        summary = json.loads(path.read_text())
        if summary["status"] != "finished":
            raise SystemExit(f"{path}: run not finished ({summary['status']}); finish the sweep first")
        val = tail_means(store.load_round_stats(summary["run_id"], "val"), TAIL)
        cells.setdefault(cell_of(summary), {})[summary["seed"]] = {
            "val": val, "change": summary["convergence"]["last_fifth_change"],
        }
    return cells


def mean(cell: dict[int, dict], key: str) -> float:
    return float(np.mean([run["val"][key] for run in cell.values()]))


def choose_t(cells: dict[str, dict[int, dict]]) -> str:
    """Step 1: the best validation worst 10% among TERM cells within MAX_MEAN_DROP of FedAvg (uniform)'s device mean."""
    floor = mean(cells["uniform"], "mean") - MAX_MEAN_DROP
    terms = [f"term t={t:g}" for t in TS]
    qualified = [c for c in terms if mean(cells[c], "mean") >= floor]
    if qualified:
        return max(qualified, key=lambda c: (mean(cells[c], "worst_10"), -terms.index(c)))
    return max(terms, key=lambda c: mean(cells[c], "mean"))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("root", type=Path, help="folder holding C1 ... C6 and C1.db ... C6.db")
    root = parser.parse_args(argv).root
    rows = []
    for name in sorted(p.name for p in root.iterdir() if p.is_dir()):
        cells = candidate_runs(root / name, root / f"{name}.db")
        seeds = sorted(cells["uniform"])
        if seeds != list(range(10)):
            raise SystemExit(f"{name}: FedAvg (uniform) ran seeds {seeds}, expected the selection seeds 0-9")
        chosen = choose_t(cells)
        lift = [cells[chosen][s]["val"]["worst_10"] - cells["uniform"][s]["val"]["worst_10"] for s in seeds]
        changes = [cells["uniform"][s]["change"] for s in seeds]
        change = float(np.mean([c for c in changes if c is not None]))
        rows.append((name, cells, chosen, float(np.mean(lift)), float(np.std(lift, ddof=1) / np.sqrt(len(lift))),
                     change))
    print(f"validation only: each run's last {TAIL} evaluations, then seeds 0-9 (mean)")
    header = ["candidate", "FedAvg dm", "FedAvg w10", "uniform dm", "uniform w10", "uniform last-fifth change"]
    header += [f"t={t:g} dm / w10" for t in TS] + ["chosen t", "lift over uniform (w10)"]
    print(" | ".join(header))
    for name, cells, chosen, lift, lift_se, change in rows:
        parts = [name, f"{mean(cells['fedavg'], 'mean'):.3f}", f"{mean(cells['fedavg'], 'worst_10'):.3f}",
                 f"{mean(cells['uniform'], 'mean'):.3f}", f"{mean(cells['uniform'], 'worst_10'):.3f}", f"{change:+.3f}"]
        parts += [f"{mean(cells[f'term t={t:g}'], 'mean'):.3f} / {mean(cells[f'term t={t:g}'], 'worst_10'):.3f}"
                  for t in TS]
        parts += [chosen.removeprefix("term "), f"{lift:+.3f} ± {lift_se:.3f}"]
        print(" | ".join(parts))
    eligible = [r for r in rows if abs(r[5]) <= FLAT]
    if not eligible:
        print("no candidate's FedAvg (uniform) is converged by the rule: none chosen")
        return 1
    best = max(r[3] for r in eligible)
    winner = next(r for r in eligible if r[3] >= best - TIE)  # ties go to the lower-numbered candidate
    print(f"chosen: {winner[0]}, TERM {winner[2]} (validation worst-10% lift over FedAvg (uniform) "
          f"{winner[3]:+.3f} ± {winner[4]:.3f}); not converged: {[r[0] for r in rows if r not in eligible] or 'none'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
