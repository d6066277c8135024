"""The robust aggregators (median, trimmed mean, Krum) and FedAvg (uniform) on the template.

Expected numbers come from naive second implementations (a loop over the
coordinates with Python's sorted, a double loop over pairs of models), from
TERM itself (FedAvg (uniform) is TERM at t = 0 with uniform base weights), or
by hand. Flower's own FedMedian, FedTrimmedAvg and Krum: tests/peer/test_robust_peer.py.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from flwr.app import Array, ArrayRecord
from mock_replies import mock_reply

from conftest import small_scenario
from term_fl.config import ConfigError
from term_fl.maths.robust import bounded_model, update_norm, update_scales
from term_fl.strategies import FedAvg, FedAvgUniform, FedMedian, FedTrimmedAvg, Krum, StackedModels, TermFedAvg
from term_fl.strategies.krum import krum_scores
from term_fl.strategies.trimmed_mean import trimmed_mean

SHAPES = {"w": (3, 2), "b": (2,), "s": ()}


def models(count: int, seed: int = 0, dtype: str = "float64") -> list[dict[str, np.ndarray]]:
    rng = np.random.default_rng(seed)
    return [{k: rng.normal(size=s).astype(dtype) for k, s in SHAPES.items()} for _ in range(count)]


def replies(locals_, sizes=None, losses=None) -> list:
    sizes = sizes if sizes is not None else [10 + 3 * i for i in range(len(locals_))]
    losses = losses if losses is not None else [0.5 + 0.1 * i for i in range(len(locals_))]
    return [mock_reply(m, {"num-examples": int(n), "partition-id": i, "train_loss_before": float(f)}, 100 + i)
            for i, (m, n, f) in enumerate(zip(locals_, sizes, losses, strict=True))]


def aggregate(strategy, locals_, global_model=None, **kwargs):
    if global_model is not None:
        strategy.current_arrays = ArrayRecord({k: Array(v) for k, v in global_model.items()})
    arrays, _ = strategy.aggregate_train(1, replies(locals_, **kwargs))
    return {k: arrays[k].numpy() for k in arrays.keys()}, strategy.last_round


def naive_trimmed_mean(locals_, cut):
    """Per coordinate: sort the values (ties by client order), drop cut at each end, average; and the shares."""
    m = len(locals_)
    shares = np.zeros(m)
    out = {}
    coordinates = sum(int(np.prod(s)) for s in SHAPES.values())
    for name, shape in SHAPES.items():
        result = np.zeros(shape)
        for index in itertools.product(*(range(n) for n in shape)):
            ranked = sorted(range(m), key=lambda k: (float(locals_[k][name][index]), k))
            kept = ranked[cut:m - cut]
            result[index] = sum(float(locals_[k][name][index]) for k in kept) / len(kept)
            for k in kept:
                shares[k] += 1.0 / len(kept) / coordinates
        out[name] = result
    return out, shares


# --- median and trimmed mean ----------------------------------------------------


@pytest.mark.parametrize(("count", "cut"), [(1, 0), (4, 0), (4, 1), (5, 2), (7, 1), (10, 2), (10, 4)])
def test_trimmed_mean_and_shares_equal_a_loop_over_the_coordinates(count, cut):
    locals_ = models(count, seed=count)
    locals_[count // 2]["w"][0, 0] = locals_[0]["w"][0, 0]  # a tie: goes to the lower client
    aggregate_, shares = trimmed_mean(StackedModels.stack(locals_), cut)
    expected, expected_shares = naive_trimmed_mean(locals_, cut)
    for name in SHAPES:
        np.testing.assert_allclose(aggregate_[name], expected[name], rtol=1e-14, atol=1e-15)
    np.testing.assert_allclose(shares, expected_shares, rtol=1e-12)
    assert shares.sum() == pytest.approx(1.0, abs=1e-12)


def test_the_median_is_the_trimmed_mean_keeping_the_middle_one_or_two():
    for count in (3, 4, 7, 8):
        locals_ = models(count, seed=count)
        mine, report = aggregate(FedMedian(), locals_)
        expected, shares = naive_trimmed_mean(locals_, (count - 1) // 2)
        for name in SHAPES:
            np.testing.assert_array_equal(mine[name], np.median(np.stack([m[name] for m in locals_]), axis=0))
            np.testing.assert_allclose(mine[name], expected[name], rtol=1e-15, atol=0)
        np.testing.assert_allclose(report.weights, shares, rtol=1e-12)


@pytest.mark.parametrize("make", [FedMedian, lambda: FedTrimmedAvg(beta=0.2)])
def test_a_client_sending_huge_weights_stays_outside_the_aggregate_and_gets_weight_zero(make):
    locals_ = models(10, seed=1)
    honest = np.stack([m["w"] for m in locals_[1:]])
    locals_[0] = {k: np.full(s, 1e6) for k, s in SHAPES.items()}  # always the highest value
    mine, report = aggregate(make(), locals_)
    assert np.all(mine["w"] >= honest.min(axis=0)) and np.all(mine["w"] <= honest.max(axis=0))
    assert report.weights[0] == 0.0 and report.weights.sum() == pytest.approx(1.0, abs=1e-12)


def test_beta_cuts_floor_beta_m_values_at_each_end_as_flower_and_scipy():
    locals_ = models(4, seed=2)
    plain, _ = aggregate(FedAvgUniform(), locals_)
    trimmed, report = aggregate(FedTrimmedAvg(beta=0.2), locals_)  # floor(0.8) = 0: the plain mean
    for name in SHAPES:
        np.testing.assert_allclose(trimmed[name], plain[name], rtol=1e-14, atol=1e-15)
    np.testing.assert_allclose(report.weights, 0.25, rtol=1e-15)
    locals_ = models(10, seed=2)
    trimmed, _ = aggregate(FedTrimmedAvg(beta=0.29), locals_)  # floor(2.9) = 2
    expected, _ = naive_trimmed_mean(locals_, 2)
    np.testing.assert_allclose(trimmed["w"], expected["w"], rtol=1e-14)


def test_integer_arrays_are_the_rounded_median_in_their_dtype():
    locals_ = [{"count": np.array(c, dtype=np.int64), "w": np.full(2, float(c))} for c in (3, 10, 4, 7)]
    mine, _ = aggregate(FedMedian(), locals_)
    assert mine["count"].dtype == np.int64 and mine["count"].shape == () and int(mine["count"]) == 6  # 5.5 -> 6


def test_a_server_learning_rate_steps_from_the_global_model_toward_the_median():
    locals_, (global_model,) = models(5, seed=4), models(1, seed=5)
    full, full_report = aggregate(FedMedian(), locals_, global_model)
    half, half_report = aggregate(FedMedian(server_learning_rate=0.5), locals_, global_model)
    for name in SHAPES:
        np.testing.assert_allclose(half[name], global_model[name] + 0.5 * (full[name] - global_model[name]),
                                   rtol=1e-14, atol=1e-15)
    np.testing.assert_allclose(half_report.weights, 0.5 * full_report.weights, rtol=1e-15)


def test_update_norms_are_bounded_before_the_median_sees_the_models():
    locals_, (global_model,) = models(5, seed=6), models(1, seed=7)
    locals_[2] = {k: v * 40.0 for k, v in locals_[2].items()}
    mine, _ = aggregate(FedMedian(max_update_norm=1.5), locals_, global_model)
    norms = np.array([update_norm(m, global_model) for m in locals_])
    bounded = [bounded_model(m, global_model, float(s)) for m, s in zip(locals_, update_scales(norms, 1.5),
                                                                         strict=True)]
    assert not all(np.array_equal(b["w"], m["w"]) for b, m in zip(bounded, locals_, strict=True))
    for name in SHAPES:
        np.testing.assert_array_equal(mine[name], np.median(np.stack([b[name] for b in bounded]), axis=0))


# --- Krum ---------------------------------------------------------------------


def test_krum_scores_equal_a_double_loop_over_pairs():
    flat = np.random.default_rng(8).normal(size=(7, 5))
    for f in (0, 1, 2, 5):
        nearest = max(1, 7 - f - 2)
        expected = [sum(sorted(float(np.sum((flat[i] - flat[j]) ** 2)) for j in range(7) if j != i)[:nearest])
                    for i in range(7)]
        np.testing.assert_allclose(krum_scores(flat, f), expected, rtol=1e-14)
    assert krum_scores(flat[:1], 0).tolist() == [0.0]  # one model: no neighbour


def test_krum_keeps_the_central_model_and_multi_krum_weights_the_kept_ones_by_size():
    locals_ = [{"w": np.array([x, 0.0]), "b": np.zeros(2), "s": np.array(0.0)}
               for x in (0.0, 0.1, -0.1, 0.2, 30.0, -40.0)]
    sizes = [10, 20, 30, 40, 50, 60]
    one, report = aggregate(Krum(num_malicious_nodes=2), locals_, sizes=sizes)
    assert report.weights.tolist() == [1.0, 0, 0, 0, 0, 0]  # the score of x = 0 is the smallest
    np.testing.assert_array_equal(one["w"], [0.0, 0.0])
    four, report = aggregate(Krum(num_malicious_nodes=2, num_nodes_to_select=4), locals_, sizes=sizes)
    np.testing.assert_allclose(report.weights, [0.1, 0.2, 0.3, 0.4, 0, 0], rtol=1e-15)
    np.testing.assert_allclose(four["w"], [0.1 * 0.0 + 0.2 * 0.1 + 0.3 * -0.1 + 0.4 * 0.2, 0.0], atol=1e-16)


def test_krum_warns_when_the_round_has_too_few_replies_for_its_guarantee(caplog):
    with caplog.at_level("WARNING", logger="flwr"):
        aggregate(Krum(num_malicious_nodes=2), models(6))
    assert "the guarantee needs more than 2 f + 2 = 6" in caplog.text


# --- FedAvg (uniform) ---------------------------------------------------------


@pytest.mark.parametrize("server_lr", [1.0, 0.3])
def test_fedavg_uniform_is_term_at_t_zero_with_uniform_base_weights_bit_for_bit(server_lr):
    locals_, (global_model,) = models(7, seed=9, dtype="float32"), models(1, seed=10, dtype="float32")
    sizes = [430, 558, 520, 548, 142, 441, 10]
    results = []
    for strategy in (FedAvgUniform(server_learning_rate=server_lr),
                     TermFedAvg(t=0.0, base_weighting="uniform", server_learning_rate=server_lr)):
        arrays, report = aggregate(strategy, locals_, global_model, sizes=sizes)
        results.append((arrays, report.weights))
    (ours, our_weights), (term, term_weights) = results
    assert all(ours[k].dtype == np.float32 and np.array_equal(ours[k], term[k]) for k in SHAPES)
    assert np.array_equal(our_weights, term_weights) and np.all(our_weights == server_lr * (1.0 / 7))


def test_fedavg_uniform_differs_from_fedavg_when_sizes_differ_and_not_when_they_are_equal():
    locals_ = models(4, seed=11)
    uniform, _ = aggregate(FedAvgUniform(), locals_, sizes=[5, 50, 20, 8])
    weighted, _ = aggregate(FedAvg(), locals_, sizes=[5, 50, 20, 8])
    assert not np.allclose(uniform["w"], weighted["w"])
    np.testing.assert_allclose(uniform["w"], np.mean([m["w"] for m in locals_], axis=0), rtol=1e-14)
    same_uniform, _ = aggregate(FedAvgUniform(), locals_, sizes=[9, 9, 9, 9])
    same_weighted, _ = aggregate(FedAvg(), locals_, sizes=[9, 9, 9, 9])
    np.testing.assert_allclose(same_uniform["w"], same_weighted["w"], rtol=1e-14)


# --- settings -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: FedTrimmedAvg(beta=0.5), r"FedTrimmedAvg: beta: Input should be less than 0.5 \(got 0.5\)"),
        (lambda: FedTrimmedAvg(beta=-0.1), r"beta: Input should be greater than or equal to 0"),
        (lambda: Krum(num_malicious_nodes=-1), r"Krum: num_malicious: Input should be greater than or equal to 0"),
        (lambda: Krum(num_nodes_to_select=0), r"Krum: num_to_keep: Input should be greater than or equal to 1"),
        (lambda: Krum(num_nodes_to_select=1.5), r"num_to_keep: Input should be a valid integer"),
    ],
)
def test_invalid_settings_raise_clear_value_errors(make, message):
    with pytest.raises(ValueError, match=message):
        make()


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("strategy.trimmed_mean.beta=0.6", r"strategy\.trimmed_mean\.beta: .*less than 0.5"),
        ("strategy.krum.num_to_keep=0", r"strategy\.krum\.num_to_keep: .*greater than or equal to 1"),
        ("strategy.krum.num_malicious=2.5", r"strategy\.krum\.num_malicious: .*integer"),
    ],
)
def test_the_scenario_refuses_bad_values_naming_the_key(override, message):
    with pytest.raises(ConfigError, match=message):
        small_scenario(override)
