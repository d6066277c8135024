"""Tail averages and the change over the last fifth of a run's curve."""

from __future__ import annotations

import math

import numpy as np
import pytest

from term_fl.comparison.convergence import last_fifth_change, tail_mean, tail_means


def test_tail_mean_averages_the_last_values_and_skips_missing_ones():
    assert tail_mean([0.1, 0.2, 0.3, 0.5], 2) == pytest.approx(0.4)
    assert tail_mean([0.1, 0.2], 10) == pytest.approx(0.15)  # fewer values than the tail: all of them
    assert tail_mean([0.1, None, float("nan"), 0.3], 3) == pytest.approx(0.3)
    assert math.isnan(tail_mean([], 3))


@pytest.mark.parametrize("tail", [0, -1, 1.5, True])
def test_a_tail_below_one_or_not_an_integer_is_refused(tail):
    with pytest.raises(ValueError, match="tail must be an integer >= 1"):
        tail_mean([0.1], tail)
    with pytest.raises(ValueError, match="tail must be an integer >= 1"):
        tail_means([{"mean": 0.1}], tail)


def test_tail_means_average_every_statistic_over_the_rounds_that_report_it():
    rounds = [{"mean": 0.5, "worst_10": 0.0, "K": 23}, {"mean": 0.6, "worst_10": 0.5, "K": 23},
              {"mean": 0.8, "worst_10": 0.25, "K": 23, "cvar": 1.5, "note": "x", "t": None}]
    out = tail_means(rounds, 2)
    assert out["mean"] == pytest.approx(0.7)
    assert out["worst_10"] == pytest.approx(0.375)
    assert out["cvar"] == pytest.approx(1.5)  # only the last round has it
    assert "note" not in out and "t" not in out


def test_last_fifth_change_is_the_fitted_slope_times_the_fifth():
    rounds = np.arange(10, 101, 10)
    values = 0.5 + 0.001 * rounds  # rises 0.02 over rounds 80..100
    assert last_fifth_change(rounds, values, 100) == pytest.approx(0.02)
    flat = last_fifth_change(rounds, np.full(10, 0.7), 100)
    assert flat == pytest.approx(0.0, abs=1e-12)


def test_last_fifth_change_uses_only_the_last_fifth():
    rounds = np.arange(1, 101)
    values = np.where(rounds <= 80, rounds / 80.0, 1.0)  # climbs, then flat in the last fifth
    assert last_fifth_change(rounds, values, 100) == pytest.approx(0.0, abs=1e-12)


def test_last_fifth_change_needs_two_evaluated_rounds_there():
    assert last_fifth_change([50, 100], [0.5, 0.6], 100) is None
    assert last_fifth_change([90, 100], [0.5, None], 100) is None
    assert last_fifth_change([90, 100], [0.5, 0.6], 100) == pytest.approx(0.2)
    with pytest.raises(ValueError, match="total_rounds"):
        last_fifth_change([1], [0.1], 0)
