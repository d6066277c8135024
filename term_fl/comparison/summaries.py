"""Compare runs: mean and standard error over seeds, paired differences against FedAvg, and picking t / q.

Pure functions over run summaries (summary.json dicts): no I/O. A *cell*
groups the runs whose resolved settings differ only by seed (same
``config_hash``). Each cell is paired with its *baseline*, the plain-FedAvg
cell of the same settings (``reference_hash``, :func:`term_fl.config.baseline_hash`):
``<split>.<stat>.diff`` is the mean over their common seeds of (cell - FedAvg)
and ``.diff_se`` its standard error, the paired comparison that removes what
the seeds share (the split of the data, the sampled devices).

Selection follows the TERM paper: among the values of a tuned parameter (t
for TERM, q for q-FFL), take the one with the best validation objective
(worst 10% by default) whose validation device mean is at most
``max_mean_drop`` below FedAvg's (else below the best candidate's); the
chosen cell is then reported on the test split. The validation statistics
may be averaged over the last evaluated rounds of each run
(``validation_tail``, filled in by the sweep) and over the clean devices
only (``validation_clean``), then over seeds.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from term_fl.maths.fairness import STATISTICS, statistic
from term_fl.common.keys import SUMMARY_NAMES, TEST, VAL
from term_fl.strategies.registry import PARAM_KEYS, STRATEGIES, cell_label

STATS = tuple(s.key for s in STATISTICS)
CLEAN = "_clean"  # suffix of a split's statistics over the devices without injected noise
TAIL = "_tail"  # suffix of validation statistics averaged over a run's last evaluated rounds
SPLITS = tuple(f"{split}{suffix}" for split in SUMMARY_NAMES.values() for suffix in ("", CLEAN)) + tuple(
    f"{SUMMARY_NAMES[VAL]}{clean}{TAIL}" for clean in ("", CLEAN)
)
"""validation, validation_clean, test, test_clean, validation_tail, validation_clean_tail."""
PAIRED = tuple(f"{SUMMARY_NAMES[TEST]}{clean}" for clean in ("", CLEAN))
"""The splits whose paired differences against FedAvg a row carries: test, test_clean."""


def mean_and_stderr(values: Sequence[float]) -> tuple[float, float | None]:
    """Mean and standard error of the mean (sample std / sqrt(n)); None for a single value."""
    arr = np.asarray([v for v in values if v is not None and not math.isnan(v)], dtype=np.float64)
    if arr.size == 0:
        return float("nan"), None
    if arr.size == 1:
        return float(arr[0]), None
    return float(arr.mean()), float(arr.std(ddof=1) / math.sqrt(arr.size))


def group_cells(summaries: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """One row per cell: its strategy, seeds, mean / stderr of each statistic per split, paired differences.

    Paired differences against the cell's baseline (the plain-FedAvg cell of
    the same settings, when it is among ``summaries``): for each split of
    :data:`PAIRED` and statistic, ``.diff`` and ``.diff_se`` over the seeds
    both cells ran, ``paired_seeds`` how many; absent for FedAvg itself and
    when no baseline cell ran.
    """
    groups: dict[str, list[Mapping[str, Any]]] = {}
    for s in summaries:
        groups.setdefault(s["config_hash"], []).append(s)
    rows = []
    for key, runs in groups.items():
        strategy = dict(runs[0]["strategy"])
        row: dict[str, Any] = {
            "cell": cell_label(strategy),
            "config_hash": key,
            "reference_hash": runs[0].get("reference_hash"),
            "strategy": strategy["name"],
            **{p: strategy.get(p) for p in PARAM_KEYS if p in strategy},
            "seeds": sorted(r["seed"] for r in runs),
            "n": len(runs),
            "run_ids": [r["run_id"] for r in runs],
        }
        for split in SPLITS:
            if split != SUMMARY_NAMES[VAL] and split != SUMMARY_NAMES[TEST] and not any(r.get(split) for r in runs):
                continue
            for stat in STATS:
                values = [((r.get(split) or {}).get(stat)) for r in runs]
                m, se = mean_and_stderr([v for v in values if v is not None])
                row[f"{split}.{stat}"] = m
                row[f"{split}.{stat}.se"] = se
        changes = [(r.get("convergence") or {}).get("last_fifth_change") for r in runs]
        if any(c is not None for c in changes):
            row["convergence"], row["convergence.se"] = mean_and_stderr([c for c in changes if c is not None])
        baseline = groups.get(row["reference_hash"] or "")
        if baseline and row["reference_hash"] != key:
            row.update(paired_differences(runs, baseline))
        rows.append(row)
    return rows


def paired_differences(
    runs: Sequence[Mapping[str, Any]], baseline: Sequence[Mapping[str, Any]]
) -> dict[str, Any]:
    """Mean and standard error over common seeds of (run - baseline run), per statistic of the :data:`PAIRED` splits."""
    by_seed = {b["seed"]: b for b in baseline}
    pairs = [(r, by_seed[r["seed"]]) for r in sorted(runs, key=lambda r: r["seed"]) if r["seed"] in by_seed]
    out: dict[str, Any] = {"paired_seeds": len(pairs)}
    for split in PAIRED:
        for stat in STATS:
            diffs = [
                a - b
                for a, b in (((r.get(split) or {}).get(stat), (f.get(split) or {}).get(stat)) for r, f in pairs)
                if a is not None and b is not None
            ]
            if diffs:
                out[f"{split}.{stat}.diff"], out[f"{split}.{stat}.diff_se"] = mean_and_stderr(diffs)
    return out


def significant(row: Mapping[str, Any], key: str, z: float = 2.0) -> bool | None:
    """Whether the paired difference ``key`` (e.g. 'test.worst_10') is more than ``z`` standard errors from 0."""
    diff, se = row.get(f"{key}.diff"), row.get(f"{key}.diff_se")
    if diff is None or se is None or math.isnan(diff):
        return None
    return abs(diff) > z * se


def family(row: Mapping[str, Any]) -> str:
    """The cells a selection chooses among: the cell label without its tuned parameters.

    'term t=20' and 'term t=5' are one family ('term'); 'term t=0.1 sum'
    (summed losses) and 'term t=-2 tau=-1' (hierarchical) are others.
    """
    spec = STRATEGIES.get(row["strategy"])
    tuned = tuple(f"{key}=" for key in (spec.tuned if spec else ()))
    return " ".join(part for part in row["cell"].split() if not part.startswith(tuned))


def select_by_validation(
    rows: Sequence[Mapping[str, Any]],
    *,
    objective: str = "worst_10",
    average: str = "mean",
    max_mean_drop: float = 0.01,
    split: str = "validation",
) -> dict[str, dict[str, Any]]:
    """Per family of cells (:func:`family`: 'term', 'qffl', 'term sum' ...), the chosen cell (paper's rule, on validation).

    ``objective`` may be any statistic of :data:`term_fl.maths.fairness.STATISTICS`:
    the best is the highest, or the lowest for a statistic where lower is
    better (std, the loss risks). ``average`` is the statistic that may drop
    at most ``max_mean_drop`` below FedAvg's: the device mean by default.
    ``split`` is where both are read (``validation``, ``validation_tail``,
    ``validation_clean``, ``validation_clean_tail``); a row without it falls
    back to ``validation``.
    """
    def value(row: Mapping[str, Any], stat: str) -> float:
        return row.get(f"{split}.{stat}", row[f"validation.{stat}"])

    plain = [r for r in rows if r["strategy"] == "fedavg" and r.get("reference_hash") == r["config_hash"]]
    fedavg = plain or [r for r in rows if r["strategy"] == "fedavg"]
    families: dict[str, list[Mapping[str, Any]]] = {}
    for row in rows:
        if row["strategy"] != "fedavg":
            families.setdefault(family(row), []).append(row)
    chosen: dict[str, dict[str, Any]] = {}
    for name, candidates in sorted(families.items()):
        if fedavg:
            reference = max(value(r, average) for r in fedavg)
            reference_from = "fedavg"
        else:
            reference = max(value(r, average) for r in candidates)
            reference_from = "best candidate"
        eligible = [r for r in candidates if value(r, average) >= reference - max_mean_drop - 1e-12]
        pool = eligible or candidates
        stat = objective if eligible else average
        sign = statistic(stat).direction  # lower std is better
        best = max(pool, key=lambda r: (sign * value(r, stat), value(r, average)))
        chosen[name] = {
            "cell": best["cell"],
            "config_hash": best["config_hash"],
            "rule": (
                f"best {split} {objective} with {split} {average} >= "
                f"{reference_from} {reference:.4f} - {max_mean_drop}"
                if eligible
                else f"no candidate within {max_mean_drop} of {reference_from}: best {split} {average}"
            ),
            "validation": {s: value(best, s) for s in STATS},
            "test": {s: best[f"test.{s}"] for s in STATS},
            "test_se": {s: best[f"test.{s}.se"] for s in STATS},
        }
    return chosen
