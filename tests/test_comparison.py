"""Comparison of runs: mean and standard error over seeds, and the paper's selection rule."""

from __future__ import annotations

import math

import pytest

from term_fl.comparison import group_cells, mean_and_stderr, select_by_validation


def summary(name, seed, val_avg, val_worst, test_avg, cfg, **strategy):
    stats = lambda avg, worst: {"pooled_mean": avg, "worst_10": worst}  # noqa: E731
    return {"run_id": f"{cfg}-{seed}", "config_hash": cfg, "seed": seed, "strategy": {"name": name, **strategy},
            "validation": stats(val_avg, val_worst), "test": stats(test_avg, 0.5)}


def test_mean_and_standard_error_match_a_hand_computation():
    m, se = mean_and_stderr([0.8, 0.9, 1.0])
    assert m == pytest.approx(0.9)
    assert se == pytest.approx(math.sqrt(((0.1**2) * 2) / 2) / math.sqrt(3))
    assert mean_and_stderr([0.7]) == (0.7, None)


def test_cells_group_seeds_by_config_hash():
    rows = group_cells([summary("fedavg", s, 0.8, 0.1, 0.8 + s / 100, "a") for s in range(3)]
                       + [summary("term", 0, 0.79, 0.3, 0.78, "b", t=2.0)])
    by_cell = {r["cell"]: r for r in rows}
    assert by_cell["fedavg"]["n"] == 3 and by_cell["fedavg"]["test.pooled_mean"] == pytest.approx(0.81)
    assert by_cell["term t=2"]["n"] == 1 and by_cell["term t=2"]["test.pooled_mean.se"] is None
    assert "test_clean.pooled_mean" not in by_cell["fedavg"]


def test_selection_takes_the_best_worst_10_within_the_margin_of_fedavg():
    rows = group_cells([
        summary("fedavg", 0, 0.80, 0.10, 0.8, "f"),
        summary("term", 0, 0.795, 0.20, 0.8, "t1", t=1.0),   # within 0.01: eligible
        summary("term", 0, 0.75, 0.50, 0.8, "t9", t=9.0),    # best worst-10% but average drops 0.05
    ])
    chosen = select_by_validation(rows, max_mean_drop=0.01)
    assert chosen["term"]["cell"] == "term t=1"
    assert select_by_validation(rows, max_mean_drop=0.1)["term"]["cell"] == "term t=9"
