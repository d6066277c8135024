"""Why our vehicle numbers differ from the TERM paper's, measured on a sweep of configs/vehicle-paper.toml.

    python scripts/paper_reasons.py runs/sweep-vehicle-paper [--db runs/results.db]

Prints: the spread of the device sizes n_k; the rank correlation (Spearman)
of the summed losses F_k with n_k among each round's sampled devices, and
the weight TERM (summed losses, t = 0.1, lambda = 1) gives the largest one;
and how many test samples the devices of each run's worst 10% hold.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from pathlib import Path

import numpy as np
from scipy import stats

from term_fl.results import ResultsStore


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sweep", type=Path, help="the sweep folder (one run folder per cell and seed)")
    parser.add_argument("--db", type=Path, default=Path("runs/results.db"), help="the sweep's results store")
    args = parser.parse_args(argv)
    summaries = [json.loads(p.read_text()) for p in sorted(args.sweep.glob("*/summary.json"))]
    store = ResultsStore.open_readonly(args.db)

    # 1. device sizes (train split) and test split sizes
    first = summaries[0]["run_id"]
    train = store.load_train(first)
    sizes = {int(p): int(n) for p, n in zip(train["partition_id"], train["num_examples"], strict=True)}
    print(f"devices sampled: {len(sizes)}; training examples n_k from {min(sizes.values())} to {max(sizes.values())} "
          f"(median {int(np.median(list(sizes.values())))})")

    # 2. summed losses against sizes, and the largest device's weight, under summed-loss TERM
    rhos, shares = [], []
    for summary in summaries:
        strategy = summary["strategy"]
        if not (strategy["name"] == "term" and strategy.get("loss_reduction") == "sum" and strategy.get("lam") == 1.0):
            continue
        rows = store.load_train(summary["run_id"])
        for rnd in np.unique(rows["round"]):
            keep = (rows["round"] == rnd) & rows["included"].astype(bool)
            loss, n, weight = rows["train_loss"][keep], rows["num_examples"][keep], rows["tilted_weight"][keep]
            rhos.append(stats.spearmanr(loss, n).statistic)
            shares.append(weight[np.argmax(n)])
    if rhos:
        print(f"summed-loss TERM t = {strategy['t']:g}: Spearman(F_k, n_k) among a round's devices "
              f"{np.mean(rhos):+.2f} on average ({len(rhos)} rounds); the round's largest device gets "
              f"{np.median(shares):.2f} of the weight (median)")

    # 3. the test samples behind each run's worst 10%
    counts = Counter(d["examples"] for s in summaries for d in s.get("worst_10_devices", {}).get("test", []))
    total = sum(counts.values())
    print("test samples of the devices in the worst 10%: " +
          ", ".join(f"{n}: {c} of {total}" for n, c in sorted(counts.items())))
    return 0


if __name__ == "__main__":
    sys.exit(main())
