"""The statistics of a comparison over seeds: mean ± SE, the paired t-test, the exact sign-flip test, Holm.

Expected values come from a hand computation (the t distribution with 2
degrees of freedom has closed forms), from scipy.stats' own paired test
(``ttest_rel``) and permutation test, and from naive enumerations written here.
"""

from __future__ import annotations

import itertools
import math
import statistics

import numpy as np
import pytest
from scipy import stats

from term_fl.comparison.paired import (
    ALPHA, MIN_SEEDS, holm, is_significant, mean_se, paired_difference, sign_flip_p, t_test,
)  # fmt: skip


def test_the_t_test_of_1_2_3_matches_a_hand_computation():
    # mean 2, sample std 1, se 1/sqrt(3), t = 2 sqrt(3), 2 degrees of freedom:
    # P(|T| >= t) = 1 - t / sqrt(2 + t^2); the 97.5% quantile q solves q / sqrt(2 + q^2) = 0.95
    result = t_test([1.0, 2.0, 3.0])
    t = 2 * math.sqrt(3)
    q = math.sqrt(2 * 0.95**2 / (1 - 0.95**2))  # 4.3027
    assert result["t"] == pytest.approx(t) and result["df"] == 2
    assert result["p_value"] == pytest.approx(1 - t / math.sqrt(2 + t * t))  # 0.0742
    assert result["ci95"] == pytest.approx([2 - q / math.sqrt(3), 2 + q / math.sqrt(3)])
    assert q == pytest.approx(4.3027, abs=1e-4)


@pytest.mark.parametrize("n", [2, 3, 5, 10, 20])
def test_paired_difference_is_scipys_paired_t_test(n):
    rng = np.random.default_rng(n)
    cell, reference = rng.normal(0.6, 0.1, n), rng.normal(0.55, 0.1, n)
    got = paired_difference(dict(enumerate(cell)), dict(enumerate(reference)))
    expected = stats.ttest_rel(cell, reference)
    assert got["t"] == pytest.approx(expected.statistic) and got["p_value"] == pytest.approx(expected.pvalue)
    assert got["df"] == n - 1 and got["n"] == n and got["seeds"] == list(range(n))
    d = cell - reference
    se = statistics.stdev(d) / math.sqrt(n)
    assert got["mean"] == pytest.approx(statistics.fmean(d)) and got["se"] == pytest.approx(se)
    half = stats.t.ppf(0.975, n - 1) * se
    assert got["ci95"] == pytest.approx([d.mean() - half, d.mean() + half])


def test_paired_difference_pairs_by_seed_and_skips_what_either_lacks():
    got = paired_difference({0: 0.5, 1: 0.7, 2: None, 3: 0.9, 5: float("nan")}, {0: 0.4, 1: 0.5, 2: 0.1, 3: 0.6, 4: 1.0})
    assert got["seeds"] == [0, 1, 3] and got["n"] == 3
    assert got["mean"] == pytest.approx(statistics.fmean([0.1, 0.2, 0.3]))
    assert got["p_value"] == pytest.approx(stats.ttest_rel([0.5, 0.7, 0.9], [0.4, 0.5, 0.6]).pvalue)


@pytest.mark.parametrize("differences", [[], [0.1], [0.2, 0.2, 0.2], [0.0, 0.0]])
def test_no_t_test_for_fewer_than_two_seeds_or_no_spread(differences):
    assert t_test(differences) == {"t": None, "df": None, "p_value": None, "ci95": [None, None]}


def naive_sign_flip(d: list[float]) -> float:
    """Every sign pattern enumerated: the share with |sum s_i |d_i|| >= |sum d_i|."""
    observed = abs(sum(d))
    sums = [abs(sum(s * abs(x) for s, x in zip(signs, d, strict=True))) for signs in itertools.product((1, -1), repeat=len(d))]
    return sum(v >= observed - 1e-12 for v in sums) / len(sums)


@pytest.mark.parametrize("seed", range(12))
def test_the_sign_flip_p_value_counts_every_sign_pattern(seed):
    rng = np.random.default_rng(seed)
    n = 1 + seed % 9
    d = rng.normal(0.05 * (seed % 3), 0.1, n).round(3).tolist()  # rounding makes ties
    assert sign_flip_p(d) == pytest.approx(naive_sign_flip(d), abs=1e-12)


def test_the_sign_flip_p_value_is_scipys_exact_permutation_test():
    d = np.array([0.12, -0.03, 0.08, 0.15, 0.02, 0.09, -0.01])
    exact = stats.permutation_test((d,), np.mean, permutation_type="samples", n_resamples=np.inf,
                                   alternative="two-sided")  # fmt: skip
    assert sign_flip_p(d.tolist()) == pytest.approx(exact.pvalue)


def test_the_sign_flip_test_is_exact_for_twenty_seeds_and_bounded_below_by_two_over_two_to_the_n():
    assert sign_flip_p([0.1] * 20) == pytest.approx(2 / 2**20)
    assert sign_flip_p([0.1, 0.1, 0.1]) == pytest.approx(0.25)
    assert sign_flip_p([0.0, 0.0, 0.0]) == 1.0 and sign_flip_p([]) is None


def test_holm_matches_a_hand_computation_and_leaves_none_out_of_the_family():
    # sorted 0.005 (x4 = 0.02), 0.01 (x3 = 0.03), 0.03 (x2 = 0.06), 0.04 (x1 = 0.04 -> 0.06, monotone)
    assert holm([0.01, 0.04, None, 0.03, 0.005]) == pytest.approx([0.03, 0.06, None, 0.06, 0.02])
    assert holm([0.5, 0.9]) == pytest.approx([1.0, 1.0]) and holm([]) == []


@pytest.mark.parametrize("seed", range(20))
def test_holm_rejects_what_the_step_down_procedure_rejects(seed):
    # Holm's procedure: with p sorted, reject H_(1..k) where k is the last i with p_(j) <= alpha / (m - j + 1)
    # for every j <= i; the adjusted p-value is below alpha exactly for those.
    rng = np.random.default_rng(seed)
    p = (rng.uniform(0, 0.1, 8) ** rng.uniform(0.5, 3)).tolist()
    for alpha in (0.01, 0.05, 0.1):
        order = sorted(range(len(p)), key=lambda i: p[i])
        rejected = set()
        for rank, i in enumerate(order):
            if p[i] > alpha / (len(p) - rank):
                break
            rejected.add(i)
        assert {i for i, a in enumerate(holm(p)) if a < alpha} == rejected


def test_a_mark_needs_holms_p_below_alpha_and_three_seeds():
    assert ALPHA == 0.05 and MIN_SEEDS == 3
    assert is_significant(0.01, 3) and not is_significant(0.01, 2) and not is_significant(0.05, 10)
    assert not is_significant(None, 10)


def test_mean_se_is_the_sample_standard_error_of_the_finite_values():
    assert mean_se([0.8, None, 0.9, float("nan"), 1.0]) == pytest.approx(
        {"mean": 0.9, "se": statistics.stdev([0.8, 0.9, 1.0]) / math.sqrt(3), "n": 3})
    assert mean_se([0.7]) == {"mean": 0.7, "se": None, "n": 1}
    assert mean_se([]) == {"mean": None, "se": None, "n": 0}
