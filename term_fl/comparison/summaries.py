"""Compare a sweep's runs: cells over seeds, paired differences against the baselines, and picking t / q.

Pure functions over run summaries (summary.json dicts): no I/O. A *cell*
groups the runs whose resolved settings differ only by seed (same
``config_hash``). :func:`group_cells` turns the cells into the rows of
``comparison.csv`` / ``comparison.json`` with the one comparison every
surface shows (:func:`term_fl.comparison.table.compare_cells`): per cell
and statistic the mean and standard error over seeds, and against each
baseline cell of the same settings (FedAvg, and every strategy the registry
flags ``baseline``) the paired difference over their common seeds with the
paired t-test, Holm's correction and the mark.

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

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from term_fl.comparison.cells import cell_labels, flat_settings
from term_fl.comparison.paired import mean_se
from term_fl.comparison.pairing import BASELINES
from term_fl.comparison.table import CellValues, compare_cells
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
"""The splits whose paired differences a row carries: test, test_clean (each its own table: its own Holm family)."""


def mean_and_stderr(values: Sequence[float]) -> tuple[float, float | None]:
    """:func:`term_fl.comparison.paired.mean_se` as a pair (mean, standard error): NaN and None for no value."""
    result = mean_se(values)
    return (float("nan") if result["mean"] is None else result["mean"]), result["se"]


def _settings(summary: Mapping[str, Any]) -> dict[str, Any]:
    """What pairing reads of a run: its flat settings from ``config`` (the resolved scenario, as config.json
    holds it), or, for a summary without it, its ``reference_hash`` (the hash of the same settings)."""
    strategy = dict(summary.get("strategy") or {})
    if summary.get("config"):
        return flat_settings(summary["config"], {k: v for k, v in strategy.items() if k != "name"})
    params = {f"strategy.{k}": v for k, v in strategy.items()}
    return {"reference_hash": summary.get("reference_hash") or summary["config_hash"], **params}


def group_cells(summaries: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """One row per cell: its strategy, seeds, mean / stderr of each statistic per split, paired differences.

    A summary may carry ``config`` (the resolved scenario): the cell is then
    paired by its settings (:mod:`term_fl.comparison.pairing`); without it,
    by ``reference_hash``. Paired differences (:data:`PAIRED` splits) against
    each baseline cell that is among ``summaries``: ``differences`` (baseline
    strategy -> split -> statistic -> mean, se, n, seeds, t, df, p_value,
    p_holm, ci95, p_signflip, significant) and ``baselines`` (baseline
    strategy -> its cell's config_hash). Against FedAvg also, as before
    0.3.0, ``<split>.<stat>.diff`` and ``.diff_se`` and ``paired_seeds``;
    absent for FedAvg itself and when no FedAvg cell ran.
    """
    groups: dict[str, list[Mapping[str, Any]]] = {}
    for s in summaries:
        groups.setdefault(s["config_hash"], []).append(s)
    cells = []
    for key, runs in groups.items():
        splits = [split for split in SPLITS
                  if split in (SUMMARY_NAMES[VAL], SUMMARY_NAMES[TEST]) or any(r.get(split) for r in runs)]  # fmt: skip
        values = {split: {stat: {r["seed"]: (r.get(split) or {}).get(stat) for r in runs} for stat in STATS}
                  for split in splits}  # fmt: skip
        cells.append(CellValues(key, runs[0]["strategy"]["name"], _settings(runs[0]), values))
    compared = compare_cells(cells, PAIRED)
    labels = distinct_labels(cells, [groups[cell.key][0]["strategy"] for cell in cells])
    return [_row(groups[cell.key], cell, compared[cell.key], label) for cell, label in zip(cells, labels, strict=True)]


def distinct_labels(cells: Sequence[CellValues], strategies: Sequence[Mapping[str, Any]]) -> list[str]:
    """Each cell's label ('term t=3'); cells that would share one also name the settings that tell them apart
    ('term t=0.1 sum min_test_samples=5', :func:`term_fl.comparison.cells.cell_labels`)."""
    labels = [cell_label(dict(strategy)) for strategy in strategies]
    shared = {label for label in labels if labels.count(label) > 1}
    if not shared or any("reference_hash" in cell.settings for cell in cells):  # summaries without config.json
        return labels
    named, _ = cell_labels(labels, [cell.settings for cell in cells], strategies=[cell.strategy for cell in cells])
    return [new if old in shared else old for old, new in zip(labels, named, strict=True)]


def _row(
    runs: Sequence[Mapping[str, Any]], cell: CellValues, compared: Mapping[str, Any], label: str
) -> dict[str, Any]:
    """A cell's row of comparison.json: identity, statistics, convergence, paired differences."""
    strategy = dict(runs[0]["strategy"])
    row: dict[str, Any] = {
        "cell": label,
        "config_hash": cell.key,
        "reference_hash": runs[0].get("reference_hash"),
        "strategy": strategy["name"],
        **{p: strategy.get(p) for p in PARAM_KEYS if p in strategy},
        "seeds": sorted(r["seed"] for r in runs),
        "n": len(runs),
        "run_ids": [r["run_id"] for r in runs],
    }
    for split, by_stat in compared["stats"].items():
        for stat, value in by_stat.items():
            row[f"{split}.{stat}"] = value["mean"]
            row[f"{split}.{stat}.se"] = value["se"]
    changes = [(r.get("convergence") or {}).get("last_fifth_change") for r in runs]
    if any(c is not None for c in changes):
        row["convergence"], row["convergence.se"] = mean_and_stderr([c for c in changes if c is not None])
    if compared["baselines"]:
        row["baselines"] = compared["baselines"]
        row["differences"] = compared["differences"]
    first = compared["differences"].get(BASELINES[0])
    if first is not None:  # the fields of term-fl 0.2: against FedAvg
        row["paired_seeds"] = max((d["n"] for by_stat in first.values() for d in by_stat.values()), default=0)
        for split, by_stat in first.items():
            for stat, d in by_stat.items():
                if d["n"]:
                    row[f"{split}.{stat}.diff"], row[f"{split}.{stat}.diff_se"] = d["mean"], d["se"]
    return row


def significant(row: Mapping[str, Any], key: str, baseline: str = BASELINES[0]) -> bool | None:
    """Whether the row's paired difference ``key`` (e.g. 'test.worst_10') against ``baseline`` is marked
    significant (:func:`term_fl.comparison.paired.is_significant`); None where there is no such difference."""
    split, _, stat = key.partition(".")
    difference = (((row.get("differences") or {}).get(baseline) or {}).get(split) or {}).get(stat)
    return None if difference is None or difference["mean"] is None else difference["significant"]


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
    reference: str = BASELINES[0],
    report_rows: Sequence[Mapping[str, Any]] | None = None,
) -> dict[str, dict[str, Any]]:
    """Per family of cells (:func:`family`: 'term', 'qffl', 'term sum' ...), the chosen cell (paper's rule, on validation).

    ``objective`` may be any statistic of :data:`term_fl.maths.fairness.STATISTICS`:
    the best is the highest, or the lowest for a statistic where lower is
    better (std, the loss risks). ``average`` is the statistic that may drop
    at most ``max_mean_drop`` below FedAvg's: the device mean by default.
    ``split`` is where both are read (``validation``, ``validation_tail``,
    ``validation_clean``, ``validation_clean_tail``); a row without it falls
    back to ``validation``. ``reference`` is the baseline strategy whose
    ``average`` bounds the drop. ``rows`` are the cells over the selection
    seeds; with ``report_rows`` (the same cells over the report seeds) the
    chosen cell's test statistics are the report seeds' (None where the
    chosen cell has no report row), so nothing reported took part in the
    choice.
    """
    def value(row: Mapping[str, Any], stat: str) -> float:
        return row.get(f"{split}.{stat}", row[f"validation.{stat}"])

    baseline = reference
    plain = [r for r in rows if r["strategy"] == baseline and r.get("reference_hash") == r["config_hash"]]
    fedavg = plain or [r for r in rows if r["strategy"] == baseline]
    reported = {r["config_hash"]: r for r in (rows if report_rows is None else report_rows)}
    families: dict[str, list[Mapping[str, Any]]] = {}
    for row in rows:
        if row["strategy"] not in BASELINES:  # a baseline is compared with, never chosen
            families.setdefault(family(row), []).append(row)
    chosen: dict[str, dict[str, Any]] = {}
    for name, candidates in sorted(families.items()):
        if fedavg:
            reference = max(value(r, average) for r in fedavg)
            reference_from = baseline
        else:
            reference = max(value(r, average) for r in candidates)
            reference_from = "best candidate"
        eligible = [r for r in candidates if value(r, average) >= reference - max_mean_drop - 1e-12]
        pool = eligible or candidates
        stat = objective if eligible else average
        sign = statistic(stat).direction  # lower std is better
        best = max(pool, key=lambda r: (sign * value(r, stat), value(r, average)))
        report = reported.get(best["config_hash"], {})
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
            "test": {s: report.get(f"test.{s}") for s in STATS},
            "test_se": {s: report.get(f"test.{s}.se") for s in STATS},
        }
    return chosen
