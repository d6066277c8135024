"""Properties of term_fl.maths.tilting, checked against a naive second implementation.

The naive forms below are the paper's formulas typed directly
(np.log(np.sum(a * np.exp(t * v))) / t) and are only used where exp cannot
overflow.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from term_fl.maths.tilting import (
    TermRound,
    hierarchical_objective,
    running_tilted_weights,
    term_round,
    tilted_objective,
    tilted_weights,
    update_running_estimate,
)

# --- naive reference implementations (safe ranges only) --------------------


def naive_objective(v, t, w=None):
    v = np.asarray(v, dtype=float)
    a = np.ones_like(v) if w is None else np.asarray(w, dtype=float)
    a = a / a.sum()
    if t == 0:
        return float(np.sum(a * v))
    return float(np.log(np.sum(a * np.exp(t * v))) / t)


def naive_weights(v, t, w=None):
    v = np.asarray(v, dtype=float)
    a = np.ones_like(v) if w is None else np.asarray(w, dtype=float)
    a = a / a.sum()
    e = a * np.exp(t * v)
    return e / e.sum()


# --- hypothesis strategies -------------------------------------------------

safe_values = st.lists(
    st.floats(-10, 10, allow_nan=False, allow_infinity=False), min_size=1, max_size=12
)
# the naive formula loses accuracy as t -> 0 (log(1 + tiny) / tiny): tested separately
safe_tilts = st.one_of(st.floats(-5, -1e-3), st.floats(1e-3, 5), st.just(0.0))
any_values = st.lists(
    st.floats(-1e4, 1e4, allow_nan=False, allow_infinity=False), min_size=1, max_size=12
)
any_tilts = st.floats(-1000, 1000, allow_nan=False, allow_infinity=False)


@st.composite
def values_and_weights(draw, elements=st.floats(-10, 10)):
    n = draw(st.integers(1, 12))
    values = draw(st.lists(elements, min_size=n, max_size=n))
    weights = draw(st.lists(st.floats(0.01, 100), min_size=n, max_size=n))
    return np.array(values), np.array(weights)


def close(x, y, rel=1e-9, abs_=1e-9):
    return math.isclose(x, y, rel_tol=rel, abs_tol=abs_)


# --- tilted objective -------------------------------------------------------


@given(values_and_weights(st.floats(-1e4, 1e4)))
def test_t_zero_equals_weighted_mean(vw):
    v, w = vw
    assert tilted_objective(v, 0.0, w) == float(np.sum(w / w.sum() * v))
    assert close(tilted_objective(v, 0.0, w), float(np.average(v, weights=w)), 1e-12, 1e-8)
    assert close(tilted_objective(v, 0.0), float(np.mean(v)), 1e-12, 1e-8)


@given(values_and_weights(), safe_tilts)
def test_objective_matches_naive_formula(vw, t):
    v, w = vw
    assert close(tilted_objective(v, t, w), naive_objective(v, t, w))


@given(values_and_weights(), st.floats(1e-12, 1e-5), st.sampled_from([-1.0, 1.0]))
def test_near_zero_tilt_matches_second_order_expansion(vw, magnitude, sign):
    v, w = vw
    t = sign * magnitude
    a = w / w.sum()
    mean = np.sum(a * v)
    c = v - mean
    # cumulant expansion: R(t) = mean + t k2 / 2 + t^2 k3 / 6 + O(t^3)
    expansion = mean + t * np.sum(a * c**2) / 2 + t**2 * np.sum(a * c**3) / 6
    assert close(tilted_objective(v, t, w), float(expansion), 1e-9, 1e-12)


@given(values_and_weights(), st.floats(1e-9, 1.0))
def test_near_zero_tilt_is_continuous_at_zero(vw, t):
    v, w = vw
    gap = tilted_objective(v, t, w) - tilted_objective(v, 0.0, w)
    a = w / w.sum()
    variance = float(np.sum(a * (v - np.sum(a * v)) ** 2))
    # 0 <= R(t) - R(0) <= t * max|c|^2 (R' = tilted variance <= range^2)
    assert -1e-12 <= gap <= t * float(np.ptp(v)) ** 2 + 1e-12
    if t < 1e-6:
        assert close(gap, t * variance / 2, 1e-3, 1e-13)


@given(values_and_weights(st.floats(-100, 100)), st.floats(50, 1000))
def test_large_positive_t_approaches_max(vw, t):
    v, w = vw
    a = w / w.sum()
    top = np.argmax(v)
    r = tilted_objective(v, t, w)
    # a_top exp(t max) <= sum <= exp(t max)
    assert v.max() + math.log(a[top]) / t - 1e-9 <= r <= v.max() + 1e-9


@given(values_and_weights(st.floats(-100, 100)), st.floats(50, 1000))
def test_large_negative_t_approaches_min(vw, s):
    v, w = vw
    a = w / w.sum()
    bottom = np.argmin(v)
    r = tilted_objective(v, -s, w)
    assert v.min() - 1e-9 <= r <= v.min() - math.log(a[bottom]) / s + 1e-9


def test_extreme_tilts_reach_max_and_min_by_hand():
    v = [1.0, 2.0, 3.0]
    assert tilted_objective(v, 1000.0) == pytest.approx(3.0 - math.log(3) / 1000, abs=1e-12)
    assert tilted_objective(v, -1000.0) == pytest.approx(1.0 + math.log(3) / 1000, abs=1e-12)


@pytest.mark.parametrize("t", [5e-324, -5e-324, 1e-300, 1e-20, -1e-12])
def test_a_tiny_tilt_is_the_mean_plus_half_t_times_the_variance(t):
    """R(t) = mean + (t/2) var + O(t^2): a subnormal t once gave -0.4 for a mean of 0.6 (t c_i rounded, then / t)."""
    v, w = np.array([0.0, 0.0, 3.0]), np.array([1.0, 3.0, 1.0])
    a = w / w.sum()
    mean = float(a @ v)
    expected = mean + 0.5 * t * float(a @ (v - mean) ** 2)
    assert tilted_objective(v, t, w) == pytest.approx(expected, rel=1e-15, abs=0)
    assert (tilted_objective(v, t, w) >= mean) if t > 0 else (tilted_objective(v, t, w) <= mean)


@given(values_and_weights(st.floats(-1e3, 1e3)), any_tilts, any_tilts)
def test_objective_non_decreasing_in_t(vw, t1, t2):
    v, w = vw
    lo, hi = sorted((t1, t2))
    scale = 1.0 + float(np.max(np.abs(v)))
    assert tilted_objective(v, lo, w) <= tilted_objective(v, hi, w) + 1e-12 * scale


@given(values_and_weights(st.floats(-1e3, 1e3)), any_tilts, st.floats(-1e3, 1e3))
def test_shift_invariance(vw, t, c):
    v, w = vw
    scale = 1.0 + float(np.max(np.abs(v))) + abs(c)
    assert close(tilted_objective(v + c, t, w), tilted_objective(v, t, w) + c, 0, 1e-12 * scale)
    np.testing.assert_allclose(tilted_weights(v + c, t, w), tilted_weights(v, t, w),
                               rtol=1e-6, atol=1e-12)


@given(values_and_weights(st.floats(-1e4, 1e4)), any_tilts)
def test_objective_lies_between_min_and_max(vw, t):
    v, w = vw
    r = tilted_objective(v, t, w)
    assert math.isfinite(r)
    scale = 1.0 + float(np.max(np.abs(v)))
    assert v.min() - 1e-12 * scale <= r <= v.max() + 1e-12 * scale


def test_zero_weight_values_are_ignored():
    v = [1.0, 5000.0, 2.0]
    w = [1.0, 0.0, 1.0]
    assert tilted_objective(v, 500.0, w) == pytest.approx(tilted_objective([1.0, 2.0], 500.0))
    p = tilted_weights(v, 500.0, w)
    assert p[1] == 0.0 and p.sum() == pytest.approx(1.0)


# --- tilted weights ---------------------------------------------------------


@given(values_and_weights(st.floats(-1e4, 1e4)), any_tilts)
def test_weights_sum_to_one_and_are_non_negative(vw, t):
    v, w = vw
    p = tilted_weights(v, t, w)
    assert np.all(np.isfinite(p)) and np.all(p >= 0)
    assert close(float(p.sum()), 1.0, 1e-12, 1e-12)


@given(values_and_weights(), safe_tilts)
def test_weights_match_naive_formula(vw, t):
    v, w = vw
    np.testing.assert_allclose(tilted_weights(v, t, w), naive_weights(v, t, w),
                               rtol=1e-9, atol=1e-15)


@given(values_and_weights(st.floats(-1e4, 1e4)))
def test_t_zero_weights_are_the_normalised_base_weights(vw):
    v, w = vw
    assert np.array_equal(tilted_weights(v, 0.0, w), w / w.sum())
    assert np.array_equal(tilted_weights(v, 0.0), np.full(v.size, 1 / v.size))


@given(values_and_weights(), safe_tilts)
def test_weights_are_base_weights_times_exp_t_value_minus_objective(vw, t):
    v, w = vw
    a = w / w.sum()
    expected = a * np.exp(t * (v - tilted_objective(v, t, w)))
    np.testing.assert_allclose(tilted_weights(v, t, w), expected, rtol=1e-9, atol=1e-15)


def test_positive_t_upweights_and_negative_t_downweights_the_largest_value():
    v = [1.0, 1.0, 4.0]
    assert tilted_weights(v, 1.0)[2] > 1 / 3 > tilted_weights(v, -1.0)[2]
    by_hand = np.array([math.e, math.e, math.e**4]) / (2 * math.e + math.e**4)
    np.testing.assert_allclose(tilted_weights(v, 1.0), by_hand, rtol=1e-14)


# --- stability --------------------------------------------------------------


@pytest.mark.parametrize("t", [1000.0, -1000.0, 200.0, -200.0])
def test_stable_at_large_tilt_with_large_values(t):
    rng = np.random.default_rng(0)
    for values in (rng.uniform(0, 1e4, 50), rng.uniform(1000, 9000, 23), np.array([1e4, -1e4])):
        r = tilted_objective(values, t)
        p = tilted_weights(values, t, rng.uniform(1, 500, values.size))
        assert math.isfinite(r) and values.min() <= r <= values.max()
        assert np.all(np.isfinite(p)) and p.sum() == pytest.approx(1.0)
        round_ = term_round(values, np.ones(values.size), t, 0.5, r - 100.0)
        assert np.all(np.isfinite(round_.weights)) and math.isfinite(round_.running_estimate)


def test_losses_in_the_thousands_at_t_200_by_hand():
    losses = np.array([1000.0, 1001.0, 3000.0])
    # only the 3000 term survives: R = 3000 + log(1/3)/200 (others are exp(-4e5))
    assert tilted_objective(losses, 200.0) == pytest.approx(3000 - math.log(3) / 200, abs=1e-9)
    np.testing.assert_allclose(tilted_weights(losses, 200.0), [0.0, 0.0, 1.0], atol=1e-300)
    p = tilted_weights(losses, -200.0)
    assert p[0] == pytest.approx(1 / (1 + math.exp(-200)))


@given(values_and_weights(), st.floats(-5, -0.01))
def test_negative_t_matches_naive_formula(vw, t):
    v, w = vw
    assert close(tilted_objective(v, t, w), naive_objective(v, t, w))
    np.testing.assert_allclose(tilted_weights(v, t, w), naive_weights(v, t, w),
                               rtol=1e-9, atol=1e-15)


# --- running estimate -------------------------------------------------------


@given(st.floats(-1e4, 1e4), st.floats(-1e4, 1e4), any_tilts)
def test_running_estimate_with_lam_one_equals_batch_objective(previous, batch, t):
    assert update_running_estimate(previous, batch, t, 1.0) == batch


@given(st.floats(-1e4, 1e4), any_tilts, st.floats(0.01, 1.0))
def test_first_round_estimate_is_the_batch_objective(batch, t, lam):
    assert update_running_estimate(None, batch, t, lam) == batch


@given(st.floats(-1e4, 1e4), st.floats(-1e4, 1e4), st.floats(0.01, 1.0))
def test_running_estimate_at_t_zero_is_the_linear_mix(previous, batch, lam):
    expected = (1 - lam) * previous + lam * batch
    assert close(update_running_estimate(previous, batch, 0.0, lam), expected, 1e-12, 1e-9)


@given(st.floats(-10, 10), st.floats(-10, 10), safe_tilts, st.floats(0.01, 1.0))
def test_running_estimate_matches_naive_formula(previous, batch, t, lam):
    assume(t != 0)
    naive = math.log((1 - lam) * math.exp(t * previous) + lam * math.exp(t * batch)) / t
    assert close(update_running_estimate(previous, batch, t, lam), naive)


@given(values_and_weights(), safe_tilts, st.floats(-10, 10))
def test_running_weights_match_naive_formula(vw, t, estimate):
    v, w = vw
    a = w / w.sum()
    np.testing.assert_allclose(running_tilted_weights(v, t, estimate, w),
                               a * np.exp(t * v - t * estimate), rtol=1e-9, atol=1e-300)


@given(values_and_weights(st.floats(-1e3, 1e3)), any_tilts)
def test_term_round_with_lam_one_gives_tilted_weights_summing_to_one(vw, t):
    v, w = vw
    result = term_round(v, w, t, 1.0, previous_estimate=123.0)
    assert isinstance(result, TermRound)
    assert np.array_equal(result.weights, tilted_weights(v, t, w))
    assert close(float(result.weights.sum()), 1.0, 1e-12, 1e-12)
    assert result.running_estimate == result.batch_objective == tilted_objective(v, t, w)


@given(values_and_weights(st.floats(-1e3, 1e3)), st.floats(0.01, 1.0))
def test_term_round_at_t_zero_is_fedavg(vw, lam):
    v, w = vw
    result = term_round(v, w, 0.0, lam, previous_estimate=None)
    assert np.array_equal(result.weights, w / w.sum())


def test_term_round_running_estimate_over_two_rounds_by_hand():
    t, lam = 0.7, 0.5
    f1, n1 = np.array([1.0, 2.0, 4.0]), np.array([10.0, 20.0, 30.0])
    f2, n2 = np.array([0.5, 3.0]), np.array([5.0, 15.0])
    first = term_round(f1, n1, t, lam, None)
    second = term_round(f2, n2, t, lam, first.running_estimate)

    a1, a2 = n1 / n1.sum(), n2 / n2.sum()
    rs1 = math.log(np.sum(a1 * np.exp(t * f1))) / t
    rs2 = math.log(np.sum(a2 * np.exp(t * f2))) / t
    rt2 = math.log((1 - lam) * math.exp(t * rs1) + lam * math.exp(t * rs2)) / t
    assert first.running_estimate == pytest.approx(rs1, rel=1e-12)
    assert second.batch_objective == pytest.approx(rs2, rel=1e-12)
    assert second.running_estimate == pytest.approx(rt2, rel=1e-12)
    np.testing.assert_allclose(second.weights, a2 * np.exp(t * f2 - t * rt2), rtol=1e-12)
    assert not math.isclose(second.weights.sum(), 1.0)


# --- hierarchical tilt ------------------------------------------------------

groups_strategy = st.lists(
    st.lists(st.floats(-10, 10), min_size=1, max_size=8), min_size=1, max_size=6
)


@given(groups_strategy, safe_tilts)
def test_hierarchical_with_tau_equal_t_is_the_pooled_objective(groups, t):
    pooled = np.concatenate([np.array(g) for g in groups])
    assert close(hierarchical_objective(groups, t, t), tilted_objective(pooled, t))


@given(groups_strategy)
def test_hierarchical_at_zero_tilts_is_the_pooled_mean(groups):
    pooled = np.concatenate([np.array(g) for g in groups])
    assert close(hierarchical_objective(groups, 0.0, 0.0), float(np.mean(pooled)), 1e-12, 1e-12)


@given(groups_strategy, safe_tilts)
def test_hierarchical_with_tau_zero_tilts_the_group_means(groups, t):
    means = [np.mean(g) for g in groups]
    sizes = [len(g) for g in groups]
    assert close(hierarchical_objective(groups, t, 0.0), naive_objective(means, t, sizes))


@given(groups_strategy, safe_tilts, safe_tilts)
def test_hierarchical_matches_naive_formula(groups, t, tau):
    group_obj = [naive_objective(g, tau) for g in groups]
    assert close(hierarchical_objective(groups, t, tau, [1.0] * len(groups)),
                 naive_objective(group_obj, t))


# --- invalid inputs ---------------------------------------------------------


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: tilted_objective([], 1.0), "values must hold at least one"),
        (lambda: tilted_objective([1.0, float("nan")], 1.0), "values must be finite"),
        (lambda: tilted_objective([[1.0, 2.0]], 1.0), "values must be 1-D"),
        (lambda: tilted_objective(["a"], 1.0), "values must be"),
        (lambda: tilted_objective([1.0], float("inf")), "t must be finite"),
        (lambda: tilted_objective([1.0], "x"), "t must be a real number"),
        (lambda: tilted_objective([1.0, 2.0], 1.0, [1.0]), "weights must be 1-D with one entry"),
        (lambda: tilted_objective([1.0, 2.0], 1.0, [1.0, -1.0]), "weights must be non-negative"),
        (lambda: tilted_objective([1.0, 2.0], 1.0, [0.0, 0.0]), "weights must have a positive"),
        (lambda: tilted_weights([1.0, 2.0], 1.0, [1.0, float("inf")]), "weights must be finite"),
        (lambda: update_running_estimate(1.0, 2.0, 1.0, 0.0), r"lam must be in \(0, 1\]"),
        (lambda: update_running_estimate(1.0, 2.0, 1.0, 1.5), r"lam must be in \(0, 1\]"),
        (lambda: update_running_estimate(float("nan"), 2.0, 1.0, 0.5), "previous must be finite"),
        (lambda: update_running_estimate(1.0, float("inf"), 1.0, 0.5), "batch_objective must"),
        (lambda: running_tilted_weights([1.0], 1.0, float("nan")), "running_estimate must be"),
        (lambda: running_tilted_weights([1000.0], 1.0, -1000.0), "overflows"),
        (lambda: term_round([1.0, 2.0], [1.0], 1.0, 1.0, None), "base_weights must be 1-D"),
        (lambda: term_round([1.0, float("inf")], None, 1.0, 1.0, None), "losses must be finite"),
        (lambda: hierarchical_objective([], 1.0, 1.0), "at least one group"),
        (lambda: hierarchical_objective([[1.0], []], 1.0, 1.0), r"group_values\[1\] must hold"),
        (lambda: hierarchical_objective([[1.0]], 1.0, float("nan")), "tau must be finite"),
        (lambda: hierarchical_objective([[1.0], [2.0]], 1.0, 1.0, [1.0]), "group_weights must"),
    ],
)
def test_bad_inputs_raise_clear_value_errors(call, message):
    with pytest.raises(ValueError, match=message):
        call()


@settings(max_examples=50)
@given(any_values, any_tilts)
def test_uniform_default_equals_explicit_equal_weights(v, t):
    assert close(tilted_objective(v, t), tilted_objective(v, t, [2.5] * len(v)), 1e-12, 1e-9)
