"""Compare runs: mean and standard error over seeds, and picking t / q on validation.

Pure functions over run summaries (summary.json dicts): no I/O. A *cell*
groups the runs whose resolved settings differ only by seed (same
``config_hash``). Selection follows the TERM paper: among the values of a
tuned parameter (t for TERM, q for q-FFL), take the one with the best
validation worst-10% whose validation average is at most ``max_mean_drop``
below the reference average (FedAvg's when it is in the comparison, else the
best average among the candidates); the chosen cell is then reported on the
test split.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from term_fl.fairness import STATISTICS, statistic
from term_fl.keys import SUMMARY_NAMES
from term_fl.strategies.registry import PARAM_KEYS, cell_label

STATS = tuple(s.key for s in STATISTICS)
SPLITS = (*SUMMARY_NAMES.values(), "test_clean")  # validation, test; test_clean: devices without injected noise


def mean_and_stderr(values: Sequence[float]) -> tuple[float, float | None]:
    """Mean and standard error of the mean (sample std / sqrt(n)); None for a single value."""
    arr = np.asarray([v for v in values if v is not None and not math.isnan(v)], dtype=np.float64)
    if arr.size == 0:
        return float("nan"), None
    if arr.size == 1:
        return float(arr[0]), None
    return float(arr.mean()), float(arr.std(ddof=1) / math.sqrt(arr.size))


def group_cells(summaries: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """One row per cell: its strategy, seeds, and mean / stderr of each statistic per split."""
    groups: dict[str, list[Mapping[str, Any]]] = {}
    for s in summaries:
        groups.setdefault(s["config_hash"], []).append(s)
    rows = []
    for key, runs in groups.items():
        strategy = dict(runs[0]["strategy"])
        row: dict[str, Any] = {
            "cell": cell_label(strategy),
            "config_hash": key,
            "strategy": strategy["name"],
            **{p: strategy.get(p) for p in PARAM_KEYS if p in strategy},
            "seeds": sorted(r["seed"] for r in runs),
            "n": len(runs),
            "run_ids": [r["run_id"] for r in runs],
        }
        for split in SPLITS:
            if split == "test_clean" and not any(r.get(split) for r in runs):
                continue
            for stat in STATS:
                values = [((r.get(split) or {}).get(stat)) for r in runs]
                m, se = mean_and_stderr([v for v in values if v is not None])
                row[f"{split}.{stat}"] = m
                row[f"{split}.{stat}.se"] = se
        rows.append(row)
    return rows


def select_by_validation(
    rows: Sequence[Mapping[str, Any]],
    *,
    objective: str = "worst_10",
    average: str = "pooled_mean",
    max_mean_drop: float = 0.01,
) -> dict[str, dict[str, Any]]:
    """Per strategy with several cells, the chosen cell (paper's rule, on validation).

    ``objective`` may be any statistic of :data:`term_fl.fairness.STATISTICS`:
    the best is the highest, or the lowest for a statistic where lower is
    better (std, the loss risks).
    """
    fedavg = [r for r in rows if r["strategy"] == "fedavg"]
    chosen: dict[str, dict[str, Any]] = {}
    for name in sorted({r["strategy"] for r in rows}):
        candidates = [r for r in rows if r["strategy"] == name]
        if name == "fedavg" or not candidates:
            continue
        if fedavg:
            reference = max(r[f"validation.{average}"] for r in fedavg)
            reference_from = "fedavg"
        else:
            reference = max(r[f"validation.{average}"] for r in candidates)
            reference_from = "best candidate"
        eligible = [r for r in candidates if r[f"validation.{average}"] >= reference - max_mean_drop - 1e-12]
        pool = eligible or candidates
        key = f"validation.{objective}" if eligible else f"validation.{average}"
        sign = statistic(objective).direction if eligible else statistic(average).direction  # lower std is better
        best = max(pool, key=lambda r: (sign * r[key], r[f"validation.{average}"]))
        chosen[name] = {
            "cell": best["cell"],
            "config_hash": best["config_hash"],
            "rule": (
                f"best validation {objective} with validation {average} >= "
                f"{reference_from} {reference:.4f} - {max_mean_drop}"
                if eligible
                else f"no candidate within {max_mean_drop} of {reference_from}: best validation {average}"
            ),
            "validation": {s: best[f"validation.{s}"] for s in STATS},
            "test": {s: best[f"test.{s}"] for s in STATS},
            "test_se": {s: best[f"test.{s}.se"] for s in STATS},
        }
    return chosen
