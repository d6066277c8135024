"""summary.json of a run (docs/contracts.md, 'summary.json'): what ran, how it ended, its last statistics."""

from __future__ import annotations

import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

import term_fl
from term_fl.common.keys import SUMMARY_NAMES, TEST
from term_fl.comparison.convergence import FLAT, last_fifth_change
from term_fl.config import Scenario, baseline_hash, config_hash, executor_of
from term_fl.federation.records import RoundRecord
from term_fl.maths.fairness import fairness_summary, worst_10_devices

__all__ = ["build_summary", "clean_device_statistics", "data_record", "git_commit", "versions", "worst_devices"]


def versions() -> dict[str, str]:
    import flwr

    return {"term-fl": term_fl.__version__, "flwr": flwr.__version__, "torch": torch.__version__, "numpy": np.__version__}


def git_commit() -> str | None:
    """The commit of the term-fl checkout, when it runs from one."""
    root = Path(term_fl.__file__).resolve().parent.parent
    try:
        out = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5, check=False
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None if out.returncode == 0 else None


def build_summary(
    scenario: Scenario,
    *,
    run_id: str,
    status: str,
    rounds_completed: int,
    last: RoundRecord | None,
    data: dict[str, Any],
    wall_time_s: float,
    error: str | None = None,
    last_evaluated: RoundRecord | None = None,
    validation_means: Sequence[tuple[int, float]] = (),
) -> dict[str, Any]:
    """summary.json of a run (docs/contracts.md, 'summary.json').

    The statistics are those of the last evaluated round (``last_evaluated``,
    default ``last``; a finished run always evaluates its last round);
    ``validation_means`` are the (round, validation device mean) pairs of the
    evaluated rounds, for ``convergence``.
    """
    evaluated = last_evaluated if last_evaluated is not None else last
    summary: dict[str, Any] = {
        "run_id": run_id,
        "name": scenario.run_name,
        "status": status,
        "scenario": scenario.name,
        "engine": scenario.run.engine,
        "executor": executor_of(scenario),
        "strategy": {"name": scenario.strategy.name, **scenario.strategy_params()},
        "seed": scenario.run.seed,
        "rounds_planned": scenario.run.rounds,
        "rounds_completed": rounds_completed,
        "evaluated_round": evaluated.server_round if evaluated else None,
        "config_hash": config_hash(scenario),
        "reference_hash": baseline_hash(scenario),
    }
    for split, key in SUMMARY_NAMES.items():
        summary[key] = (evaluated.stats.get(split) if evaluated else None) or None
    if evaluated is not None:
        summary["worst_10_devices"] = {key: worst_devices(evaluated.eval_rows, split)
                                       for split, key in SUMMARY_NAMES.items()}
    noisy = set((data.get("noise") or {}).get("devices") or [])
    if noisy and evaluated is not None:
        for split, key in SUMMARY_NAMES.items():
            summary[f"{key}_clean"] = clean_device_statistics(evaluated.eval_rows, noisy, split)
    if validation_means:
        rounds, values = zip(*validation_means, strict=True)
        change = last_fifth_change(rounds, values, scenario.run.rounds)
        summary["convergence"] = {
            "statistic": "validation device mean",
            "last_fifth_change": change,
            "flat": None if change is None else abs(change) <= FLAT,
        }
    if last is not None:
        summary["tilted_weights"] = {str(k): v for k, v in sorted(last.tilted_weights.items())}
        summary.update(last.diagnostics)
    summary.update(
        versions=versions(), git_commit=git_commit(), data=data, wall_time_s=round(wall_time_s, 3)
    )
    if error:
        summary["error"] = error
    return summary


def worst_devices(eval_rows: list[dict[str, Any]], split: str) -> list[dict[str, Any]]:
    """The devices that make up a split's worst 10%, with their accuracy and number of samples.

    A worst 10% of devices that hold one or two test samples moves by 0.5 with
    one prediction: the sizes say how much one number can be trusted.
    """
    rows = sorted((r for r in eval_rows if r["split"] == split), key=lambda r: r["partition_id"])
    if not rows:
        return []
    chosen = worst_10_devices(np.array([r["accuracy"] for r in rows]))
    return [{"partition_id": rows[i]["partition_id"], "accuracy": rows[i]["accuracy"], "examples": rows[i]["examples"]}
            for i in chosen]


def clean_device_statistics(
    eval_rows: list[dict[str, Any]], noisy: set[int], split: str = TEST
) -> dict[str, Any] | None:
    """Fairness statistics of a split over the devices whose data was not corrupted."""
    rows = [r for r in eval_rows if r["split"] == split and r["partition_id"] not in noisy]
    if not rows:
        return None
    return fairness_summary(
        np.array([r["accuracy"] for r in rows]),
        num_examples=np.array([r["examples"] for r in rows]),
        correct=np.array([r["correct"] for r in rows]),
    )


def data_record(scenario: Scenario, metadata: dict[str, Any]) -> dict[str, Any]:
    record = {"name": scenario.data.name, "path": metadata.get("path"), "sha256": metadata.get("sha256")}
    if metadata.get("noise"):
        record["noise"] = metadata["noise"]
    return record
