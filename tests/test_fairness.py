"""Properties of term_fl.maths.fairness and term_fl.maths.risks, against values computed by hand or naively.

The loss-risk references are the paper's formulas typed directly: a brute-force
grid over t (numpy log-sum-exp for EVaR) and decimal arithmetic (60 digits,
more where the TiVaR bracket M - (1 - alpha) cancels) for the objectives at
the reported minimisers.
"""

from __future__ import annotations

import json
import math
from decimal import Decimal, localcontext

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from term_fl.maths.fairness import (
    STATISTICS,
    Statistic,
    flagged,
    best_10,
    entropy,
    fairness_summary,
    gini,
    jain_index,
    mean_accuracy,
    pooled_mean,
    statistic,
    std,
    variance_1e4,
    worst_10,
)
from term_fl.maths.risks import (
    conditional_value_at_risk,
    entropic_value_at_risk,
    loss_risks,
    tilted_value_at_risk,
    value_at_risk,
)

SUMMARY_KEYS = {
    "mean", "pooled_mean", "worst_10", "best_10", "std", "variance_1e4",
    "jain", "entropy", "gini", "min", "max", "K",
}
RISK_KEYS = {"alpha", "var", "cvar", "evar", "evar_t", "tivar", "tivar_t"}


# --- naive references --------------------------------------------------------


def naive_gini(a):
    a = np.asarray(a, dtype=float)
    if a.mean() == 0:
        return 0.0
    return float(np.abs(a[:, None] - a[None, :]).sum() / (2 * a.size**2 * a.mean()))


def naive_cvar(losses, alpha):
    """min over the data points g of g + (1/alpha) mean (l - g)_+ (the kinks)."""
    l = np.asarray(losses, dtype=float)
    return min(g + np.maximum(l - g, 0).mean() / alpha for g in l)


def naive_evar_objective(losses, alpha, ts):
    """R(t) - (1/t) log alpha for an array of t, R by a max-shifted log-sum-exp."""
    l = np.asarray(losses, dtype=float)
    ts = np.asarray(ts, dtype=float)[:, None]
    top = l.max()
    return top + (np.log(np.mean(np.exp(ts * (l - top)), axis=1)) - math.log(alpha)) / ts[:, 0]


def brute_force_evar(losses, alpha):
    l = np.asarray(losses, dtype=float)
    spread = l.max() - l.min()
    ts = np.logspace(-4, 8, 12001) / spread
    return min(float(naive_evar_objective(l, alpha, ts).min()), l.max())  # and t -> +inf


def decimal_alpha(alpha, size):
    """alpha as term_fl.maths.fairness reads it: alpha K within 1e-9 of an integer is that integer."""
    count = Decimal(float(alpha)) * size
    nearest = count.to_integral_value()
    return nearest / size if abs(count - nearest) <= Decimal("1e-9") else Decimal(float(alpha))


def decimal_tivar_objective(losses, alpha, t):
    """l_min + (1/t) log([mean exp(t (l - l_min)) - (1 - alpha)]_+ / alpha) in decimal.

    The bracket can cancel to far below 1: the precision grows until it
    resolves the bracket (60 digits at first); None if 2,000 digits do not.
    """
    if math.isinf(t):
        return float(max(losses)) if t > 0 else float(min(losses))
    digits = 60
    while digits <= 2000:
        with localcontext() as ctx:
            ctx.prec = digits
            ctx.Emax, ctx.Emin = 10**15, -(10**15)
            l = [Decimal(float(v)) for v in losses]
            low, a = min(l), decimal_alpha(alpha, len(l))
            if t == 0:  # the limit t -> 0
                return float(low + sum(v - low for v in l) / len(l) / a)
            tt = Decimal(float(t))
            bracket = sum((tt * (v - low)).exp() for v in l) / len(l) - (1 - a)
            if bracket != 0 and bracket.adjusted() > 20 - digits:
                return math.inf if bracket < 0 else float(low + (bracket / a).ln() / tt)
        digits *= 2
    return None


def decimal_evar_objective(losses, alpha, t):
    """R(t) - (1/t) log alpha = l_max + (1/t) log(mean exp(t (l - l_max)) / alpha), 60 digits."""
    if math.isinf(t):
        return float(max(losses))
    with localcontext() as ctx:
        ctx.prec = 60
        ctx.Emax, ctx.Emin = 10**15, -(10**15)
        l = [Decimal(float(v)) for v in losses]
        high, tt = max(l), Decimal(float(t))
        m = sum((tt * (v - high)).exp() for v in l) / len(l)
        return float(high + (m / Decimal(float(alpha))).ln() / tt)


def brute_force_tivar(losses, alpha, points=141):
    """Minimum over t = 0, +inf and +-10^(-3..4) / (l_max - l_min), in decimal arithmetic."""
    l = np.asarray(losses, dtype=float)
    spread = l.max() - l.min()
    taus = np.logspace(-3, 4, points)
    ts = [0.0, math.inf] + [sign * tau / spread for tau in taus for sign in (1, -1)]
    values = [decimal_tivar_objective(l, alpha, t) for t in ts]
    return min(v for v in values if v is not None)


def risk_tolerance(losses):
    l = np.asarray(losses, dtype=float)
    return 1e-9 * (l.max() - l.min()) + 8 * np.spacing(np.abs(l).max())


# --- strategies ---------------------------------------------------------------

accuracy_vectors = st.lists(st.floats(0.0, 1.0), min_size=1, max_size=200)
alphas = st.floats(0.01, 0.99)


@st.composite
def loss_vectors(draw, max_size=200):
    """Raw floats, or seeded draws: uniform, heavy-tailed, few distinct values, scaled 1e-8..1e4."""
    if draw(st.booleans()):
        return draw(st.lists(st.floats(0.0, 1e4), min_size=1, max_size=max_size))
    size = draw(st.integers(1, max_size))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    kind = draw(st.sampled_from(["uniform", "pareto", "lognormal", "levels"]))
    scale = 10.0 ** draw(st.floats(-8.0, 4.0))
    raw = {
        "uniform": lambda: rng.uniform(size=size),
        "pareto": lambda: rng.pareto(1.1, size=size),
        "lognormal": lambda: rng.lognormal(0.0, 2.0, size=size),
        "levels": lambda: rng.integers(0, 4, size=size).astype(float),
    }[kind]()
    return np.minimum(raw * scale, 1e4).tolist()


# --- fairness statistics by hand ---------------------------------------------


def test_two_devices_by_hand():
    s = fairness_summary([0.5, 1.0])
    assert set(s) == SUMMARY_KEYS
    assert s["K"] == 2
    assert s["mean"] == pytest.approx(0.75)
    assert s["pooled_mean"] is None
    assert s["worst_10"] == 0.5 and s["best_10"] == 1.0  # floor(0.2) -> 1 device
    assert s["std"] == pytest.approx(0.25)
    assert s["variance_1e4"] == pytest.approx(625.0)
    assert s["jain"] == pytest.approx(1.5**2 / (2 * (0.25 + 1.0)))  # 0.9
    # p = (1/3, 2/3): H = log 3 - (2/3) log 2
    assert s["entropy"] == pytest.approx(math.log(3) - 2 / 3 * math.log(2))
    # |0.5 - 1| counted twice / (2 * 4 * 0.75)
    assert s["gini"] == pytest.approx(1.0 / 6.0)
    assert s["min"] == 0.5 and s["max"] == 1.0


def test_worst_and_best_10_of_23_devices_use_two():
    a = [i / 22 for i in range(23)]
    rng = np.random.default_rng(0)
    shuffled = rng.permutation(a)
    assert worst_10(shuffled) == pytest.approx((0 + 1 / 22) / 2)
    assert best_10(shuffled) == pytest.approx((21 / 22 + 1) / 2)


@pytest.mark.parametrize("k, tail", [(1, 1), (9, 1), (10, 1), (19, 1), (20, 2), (100, 10)])
def test_tail_size_is_floor_tenth_at_least_one(k, tail):
    a = np.linspace(0.0, 1.0, k)
    assert worst_10(a) == pytest.approx(np.mean(a[:tail]))
    assert best_10(a) == pytest.approx(np.mean(a[-tail:]))


def test_pooled_mean_from_counts():
    # 5 of 10 and 30 of 30 correct: 35 / 40
    assert pooled_mean([0.5, 1.0], [10, 30], [5, 30]) == pytest.approx(0.875)
    # num_examples only: (0.5 * 10 + 1.0 * 30) / 40
    assert pooled_mean([0.5, 1.0], [10, 30]) == pytest.approx(0.875)
    # counts win over accuracies when both are given
    assert pooled_mean([0.0, 0.0], [10, 30], [5, 30]) == pytest.approx(0.875)
    assert pooled_mean([0.5, 1.0]) is None
    assert fairness_summary([0.5, 1.0], num_examples=[4, 0])["pooled_mean"] == 0.5


def test_hand_values_of_a_skewed_vector():
    a = [0.0, 0.0, 1.0]
    assert mean_accuracy(a) == pytest.approx(1 / 3)
    assert jain_index(a) == pytest.approx(1.0 / 3.0)  # 1 / (3 * 1)
    assert entropy(a) == 0.0  # all mass on one device
    assert gini(a) == pytest.approx(2.0 / 3.0)  # 4 / (2 * 9 * 1/3)
    assert std(a) == pytest.approx(math.sqrt(2) / 3)
    assert variance_1e4(a) == pytest.approx(1e4 * 2 / 9)


def test_all_zero_accuracies_use_the_all_equal_values():
    s = fairness_summary([0.0] * 5)
    assert s["jain"] == 1.0
    assert s["entropy"] == pytest.approx(math.log(5))
    assert s["gini"] == 0.0
    assert s["std"] == 0.0 and s["mean"] == 0.0


def test_all_equal_accuracies_are_perfectly_fair():
    s = fairness_summary([0.7] * 23)
    assert s["jain"] == pytest.approx(1.0)
    assert s["entropy"] == pytest.approx(math.log(23))
    assert s["gini"] == 0.0
    assert s["worst_10"] == pytest.approx(0.7) and s["best_10"] == pytest.approx(0.7)


def test_summary_is_plain_json():
    s = fairness_summary(np.array([0.25, 0.5, 1.0]), np.array([4, 2, 3]), np.array([1, 1, 3]))
    for key, value in s.items():
        assert type(value) is (int if key == "K" else float), key
    assert json.loads(json.dumps(s, allow_nan=False)) == s


# --- fairness statistics: properties -----------------------------------------


@settings(max_examples=150)
@given(accuracy_vectors)
def test_summary_orderings_and_ranges(a):
    s = fairness_summary(a)
    k = len(a)
    assert s["min"] <= s["worst_10"] <= s["mean"] <= s["best_10"] <= s["max"]
    assert 0.0 < s["jain"] <= 1.0
    assert 0.0 <= s["gini"] < 1.0
    assert 0.0 <= s["entropy"] <= math.log(k)
    assert s["variance_1e4"] == pytest.approx(1e4 * s["std"] ** 2)
    assert s["gini"] == pytest.approx(naive_gini(a), abs=1e-12)


@settings(max_examples=50)
@given(st.lists(st.tuples(st.integers(0, 50), st.integers(0, 50)), min_size=1, max_size=50))
def test_pooled_mean_is_total_correct_over_total_examples(pairs):
    n = [max(x, y) for x, y in pairs]
    c = [min(x, y) for x, y in pairs]
    if sum(n) == 0:
        return
    acc = [ci / ni if ni else 0.0 for ci, ni in zip(c, n)]
    assert pooled_mean(acc, n, c) == pytest.approx(sum(c) / sum(n))
    assert pooled_mean(acc, n) == pytest.approx(sum(c) / sum(n))


# --- loss risks by hand ---------------------------------------------------------


@pytest.mark.parametrize(
    "alpha, expected",
    [(0.1, 5.0), (0.2, 4.0), (0.5, 3.0), (0.99, 1.0)],
)
def test_value_at_risk_by_hand(alpha, expected):
    # m = floor(alpha K) losses may lie above VaR: the (m+1)-th largest.
    assert value_at_risk([5, 1, 4, 2, 3], alpha) == expected


def test_value_at_risk_reads_alpha_as_a_decimal():
    # 0.29 * 100 is 28.999999999999996: still 29 losses above VaR.
    assert value_at_risk(np.arange(100.0), 0.29) == 70.0


def test_conditional_value_at_risk_by_hand():
    assert conditional_value_at_risk([5, 1, 4, 2, 3], 0.4) == pytest.approx(4.5)  # top 2
    # alpha K = 2.5: (5 + 4 + 0.5 * 3) / 2.5
    assert conditional_value_at_risk([5, 1, 4, 2, 3], 0.5) == pytest.approx(4.2)


def test_two_point_losses_by_hand():
    # l = (0, 1), alpha = 1/2: VaR 0, CVaR 1; EVaR objective log(1 + e^t) / t > 1
    # tends to 1 as t -> inf; the TiVaR bracket is e^t / 2, so its objective is 1.
    r = loss_risks([0.0, 1.0], alpha=0.5)
    assert set(r) == RISK_KEYS
    assert r["var"] == 0.0 and r["cvar"] == 1.0
    assert r["evar"] == 1.0 and r["evar_t"] == math.inf
    assert r["tivar"] == pytest.approx(1.0, abs=1e-12)


def test_tivar_reaches_var_when_most_losses_are_minimal():
    # 3 of 4 losses equal the minimum > (1 - alpha) K = 2: as t -> -inf the
    # bracket tends to 3/4 - 1/2 > 0 and the objective to 0 = VaR.
    r = loss_risks([0.0, 0.0, 0.0, 1.0], alpha=0.5)
    assert r["var"] == 0.0
    assert r["cvar"] == pytest.approx(0.5)
    assert (r["tivar"], r["tivar_t"]) == (0.0, -math.inf)
    grid = brute_force_evar([0, 0, 0, 1], 0.5)
    assert grid - 1e-6 <= r["evar"] <= grid


@pytest.mark.parametrize(
    "losses, alpha",
    [([0.0, 1.0, 2.0], 0.5), ([0, 0, 1, 1, 2, 3, 3], 0.3), ([1.0, 2.0, 10.0, 11.0], 0.1),
     ([0.2, 0.9, 0.4, 0.4, 3.0, 0.1], 0.05), ([1e3, 2e3, 5e3, 9999.0], 0.25)],
)
def test_evar_and_tivar_match_brute_force_grids(losses, alpha):
    r = loss_risks(losses, alpha)
    spread = max(losses) - min(losses)
    evar_grid = brute_force_evar(losses, alpha)
    assert r["evar"] <= evar_grid + 1e-12 * spread
    assert r["evar"] == pytest.approx(evar_grid, abs=1e-6 * spread)
    tivar_grid = brute_force_tivar(losses, alpha)
    assert r["tivar"] <= tivar_grid + 1e-12 * spread
    assert r["tivar"] == pytest.approx(tivar_grid, abs=1e-3 * spread)


def test_large_losses_stay_finite():
    r = loss_risks([1000.0, 2000.0, 5000.0, 9999.0, 9999.5], alpha=0.1)
    assert all(math.isfinite(r[k]) for k in ("var", "cvar", "evar", "tivar"))
    assert r["var"] <= r["tivar"] <= r["evar"] <= 9999.5


@pytest.mark.parametrize("alpha", [0.01, 0.1, 0.5, 0.99])
@pytest.mark.parametrize("losses", [[7.5], [7.5] * 5, [1e4] * 200])
def test_all_equal_losses_give_that_value(losses, alpha):
    r = loss_risks(losses, alpha)
    for key in ("var", "cvar", "evar", "tivar"):
        assert r[key] == losses[0]
    assert entropic_value_at_risk(losses, alpha) == (losses[0], math.inf)
    assert tilted_value_at_risk(losses, alpha) == (losses[0], 0.0)


def test_public_functions_agree_with_loss_risks():
    losses, alpha = [0.3, 2.0, 0.7, 1.1, 5.0], 0.2
    r = loss_risks(losses, alpha)
    assert value_at_risk(losses, alpha) == r["var"]
    assert conditional_value_at_risk(losses, alpha) == r["cvar"]
    assert entropic_value_at_risk(losses, alpha) == (r["evar"], r["evar_t"])
    assert tilted_value_at_risk(losses, alpha) == (r["tivar"], r["tivar_t"])
    assert loss_risks(losses)["alpha"] == 0.1


# --- loss risks: properties ---------------------------------------------------


@settings(max_examples=100)
@given(loss_vectors(), alphas)
def test_risk_orderings(losses, alpha):
    """VaR <= TiVaR <= EVaR and VaR <= CVaR <= EVaR, within [min, max]."""
    r = loss_risks(losses, alpha)
    assert min(losses) <= r["var"] <= r["tivar"] <= r["evar"] <= max(losses)
    assert r["var"] <= r["cvar"] <= r["evar"]


@settings(max_examples=60)
@given(loss_vectors(max_size=60), alphas)
def test_reported_t_attains_the_reported_risk(losses, alpha):
    """The minimisers are honest: the objective at the reported t is the risk."""
    r = loss_risks(losses, alpha)
    tol = risk_tolerance(losses)
    if max(losses) > min(losses):
        assert r["evar_t"] > 0
        assert r["evar"] == pytest.approx(
            decimal_evar_objective(losses, alpha, r["evar_t"]), abs=tol, rel=1e-12
        )
        reference = decimal_tivar_objective(losses, alpha, r["tivar_t"])
        if reference is not None:
            assert r["tivar"] == pytest.approx(reference, abs=tol, rel=1e-12)


@settings(max_examples=60)
@given(loss_vectors(), alphas)
def test_cvar_is_the_minimum_over_the_data_points(losses, alpha):
    assert conditional_value_at_risk(losses, alpha) == pytest.approx(
        naive_cvar(losses, alpha), rel=1e-12, abs=risk_tolerance(losses)
    )


@settings(max_examples=60)
@given(st.data())
def test_cvar_is_the_mean_of_the_top_alpha_fraction(data):
    size = data.draw(st.integers(2, 200))
    tail = data.draw(st.integers(1, size - 1))
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
    losses = rng.pareto(1.5, size=size) * 10.0 ** data.draw(st.floats(-8, 3))
    top = np.sort(losses)[::-1][:tail]
    assert conditional_value_at_risk(losses, tail / size) == pytest.approx(top.mean(), rel=1e-12)


@settings(max_examples=25)
@given(loss_vectors(max_size=30), alphas)
def test_evar_is_below_a_brute_force_grid(losses, alpha):
    if max(losses) == min(losses):
        return
    evar, _ = entropic_value_at_risk(losses, alpha)
    grid = brute_force_evar(losses, alpha)
    assert evar <= grid + risk_tolerance(losses)
    assert evar == pytest.approx(grid, rel=1e-5, abs=1e-5 * (max(losses) - min(losses)))


@settings(max_examples=10)
@given(loss_vectors(max_size=10), alphas)
def test_tivar_is_below_a_brute_force_grid(losses, alpha):
    if max(losses) == min(losses):
        return
    tivar, _ = tilted_value_at_risk(losses, alpha)
    assert tivar <= brute_force_tivar(losses, alpha, points=57) + risk_tolerance(losses)


@settings(max_examples=20)
@given(
    st.lists(st.integers(0, 2**30), min_size=1, max_size=50),
    alphas,
    st.integers(-1000, 1000),
)
def test_risks_shift_with_the_losses(units, alpha, shift):
    """risk(l + c) = risk(l) + c; dyadic losses make l + c exact (no ties merge)."""
    losses = np.asarray(units, dtype=float) / 2**20
    base = loss_risks(losses, alpha)
    moved = loss_risks(losses + shift, alpha)
    tol = 1e-9 * (losses.max() - losses.min()) + 1e-12 * (abs(shift) + losses.max())
    for key in ("var", "cvar", "evar", "tivar"):
        assert moved[key] == pytest.approx(base[key] + shift, abs=tol)


# --- validation -----------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs, name",
    [
        ({"accuracies": []}, "accuracies"),
        ({"accuracies": [0.5, float("nan")]}, "accuracies"),
        ({"accuracies": [0.5, 1.5]}, "accuracies"),
        ({"accuracies": [-0.1]}, "accuracies"),
        ({"accuracies": [[0.5, 0.5]]}, "accuracies"),
        ({"accuracies": ["a"]}, "accuracies"),
        ({"accuracies": [0.5, 1.0], "num_examples": [10]}, "num_examples"),
        ({"accuracies": [0.5, 1.0], "num_examples": [10, -1]}, "num_examples"),
        ({"accuracies": [0.5, 1.0], "num_examples": [10, 2.5]}, "num_examples"),
        ({"accuracies": [0.5, 1.0], "num_examples": [0, 0]}, "num_examples"),
        ({"accuracies": [0.5, 1.0], "num_examples": [10, float("nan")]}, "num_examples"),
        ({"accuracies": [0.5, 1.0], "num_examples": [10, 30], "correct": [11, 30]}, "correct"),
        ({"accuracies": [0.5, 1.0], "num_examples": [10, 30], "correct": [-1, 30]}, "correct"),
        ({"accuracies": [0.5, 1.0], "num_examples": [10, 30], "correct": [5]}, "correct"),
        ({"accuracies": [0.5, 1.0], "correct": [5, 30]}, "correct"),
    ],
)
def test_bad_summary_inputs_name_the_argument(kwargs, name):
    with pytest.raises(ValueError, match=name):
        fairness_summary(**kwargs)


@pytest.mark.parametrize(
    "losses, alpha, name",
    [
        ([], 0.1, "losses"),
        ([1.0, float("nan")], 0.1, "losses"),
        ([1.0, float("inf")], 0.1, "losses"),
        ([[1.0, 2.0]], 0.1, "losses"),
        ([1.0, 2.0], 0.0, "alpha"),
        ([1.0, 2.0], 1.0, "alpha"),
        ([1.0, 2.0], -0.5, "alpha"),
        ([1.0, 2.0], float("nan"), "alpha"),
        ([1.0, 2.0], "high", "alpha"),
    ],
)
@pytest.mark.parametrize(
    "risk",
    [value_at_risk, conditional_value_at_risk, entropic_value_at_risk,
     tilted_value_at_risk, loss_risks],
)
def test_bad_risk_inputs_name_the_argument(risk, losses, alpha, name):
    with pytest.raises(ValueError, match=name):
        risk(losses, alpha)


# --- the table of statistics --------------------------------------------------


def test_the_table_lists_every_statistic_a_round_computes_and_nothing_else():
    computed = {**fairness_summary([0.5, 0.9, 1.0], [2, 10, 4], [1, 9, 4]), **loss_risks([0.3, 1.2, 0.8])}
    not_statistics = {"K", "alpha", "evar_t", "tivar_t"}  # counts, levels and minimisers, not statistics
    assert {s.key for s in STATISTICS} == set(computed) - not_statistics
    assert len({s.key for s in STATISTICS}) == len(STATISTICS)


def test_directions_say_which_way_is_better():
    assert statistic("worst_10").direction == statistic("jain").direction == 1
    assert statistic("std").direction == statistic("gini").direction == statistic("tivar").direction == -1
    assert [s.key for s in STATISTICS if s.headline] == ["mean", "pooled_mean", "worst_10", "best_10", "std"]
    with pytest.raises(ValueError, match="unknown statistic 'worst_5'; allowed: mean, pooled_mean"):
        statistic("worst_5")


def test_the_flags_name_the_four_primary_statistics_the_tradeoff_axes_and_the_lift():
    # the lists every comparison surface shows come from these flags (term_fl.comparison.table.PRIMARY, the
    # sweep's paired columns, the dashboard's difference columns, curves and trade-off charts)
    assert flagged("primary") == ("mean", "pooled_mean", "worst_10", "std")
    assert flagged("tradeoff", "x") == ("mean",) and flagged("tradeoff", "y") == ("worst_10", "std")
    assert flagged("lift") == ("worst_10",) and flagged("group", "risk") == ("var", "cvar", "evar", "tivar")
    with pytest.raises(ValueError, match="unknown flag 'primry'; allowed: key, label"):
        flagged("primry")
    with pytest.raises(ValueError, match="Statistic 'x': tradeoff must be '', 'x' or 'y', got 'z'"):
        Statistic("x", "x", "accuracy", 1, tradeoff="z")


def test_every_surface_lists_the_flagged_statistics():
    from term_fl.cli.sweep import PAIRED_COLUMNS
    from term_fl.comparison.table import PRIMARY
    from term_fl.dashboard.queries import CURVE_PANELS, TRADEOFF

    assert [key.split(".")[1] for key, _ in PAIRED_COLUMNS] == list(PRIMARY) == list(flagged("primary"))
    assert [panel["key"] for panel in CURVE_PANELS][:-1] == list(flagged("primary"))
    assert TRADEOFF == {"x": "mean", "y": ["worst_10", "std"], "sweep_stats": ["mean", "worst_10", "std"]}


def test_the_two_accuracies_are_named_device_mean_and_pooled_never_average():
    # the papers' "average" is the mean of the device accuracies; the pooled accuracy is another number
    assert statistic("mean").label == "device mean" and statistic("pooled_mean").label == "pooled"
    assert [s.key for s in STATISTICS][:2] == ["mean", "pooled_mean"]
    assert not any("average" in s.label for s in STATISTICS)


def test_worst_10_devices_are_the_devices_worst_10_averages_ties_by_index():
    from term_fl.maths.fairness import worst_10, worst_10_devices

    accuracies = [0.9, 0.2, 0.5, 0.2, 0.8, 0.95, 0.7, 0.6, 0.3, 0.4, 0.99, 0.1, 0.85, 0.75, 0.65, 0.55, 0.45, 0.35,
                  0.25, 0.15, 0.05, 0.97, 0.93]
    chosen = worst_10_devices(accuracies)  # K = 23: two devices
    assert chosen == [20, 11]
    assert np.mean([accuracies[i] for i in chosen]) == pytest.approx(worst_10(accuracies))
    assert worst_10_devices([0.5, 0.5, 0.5]) == [0]  # at least one device, the first of a tie
