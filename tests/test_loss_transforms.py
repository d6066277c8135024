"""strategy.loss_transform: the transforms themselves, the "auto" default (TERM t < 0 only), the config hash, tilt units."""

from __future__ import annotations

import json
import logging
import math
import statistics

import numpy as np
import pytest
from flwr.app import Array, ArrayRecord

from conftest import small_scenario
from mock_replies import mock_reply
from term_fl.config import ConfigError, Scenario, config_hash, loss_transform_of
from term_fl.maths.loss_transforms import MAD_SCALE, median_mad, ranks, transform_losses
from term_fl.strategies import QFFL, FedAvg, TermFedAvg
from term_fl.strategies.reports import effective_clients


def test_median_mad_bounds_each_loss_to_c_robust_standard_deviations_around_the_median():
    losses = [1.0, 2.0, 3.0, 4.0, 100.0, -50.0]
    result = median_mad(losses, 2.0)
    med = statistics.median(losses)  # 2.5
    sigma = MAD_SCALE * statistics.median([abs(x - med) for x in losses])  # 1.4826 x 1.5
    assert (result.median, result.scale) == (med, pytest.approx(sigma, rel=1e-15))
    expected = [min(max(x, med - 2 * sigma), med + 2 * sigma) for x in losses]
    np.testing.assert_allclose(result.losses, expected, rtol=1e-15)
    np.testing.assert_allclose(result.scores, [(x - med) / sigma for x in expected], rtol=1e-12)
    assert result.bounded.tolist() == [False, False, False, False, True, True]
    assert np.max(np.abs(result.scores)) == pytest.approx(2.0)


def test_median_mad_has_no_units_and_no_sign():
    losses = np.array([0.3, 0.5, 0.6, 0.9, 4.0])
    base = median_mad(losses, 3.0).scores
    np.testing.assert_allclose(median_mad(losses * 1e4, 3.0).scores, base, rtol=1e-12)  # a squared error's scale
    np.testing.assert_allclose(median_mad(losses - 7.0, 3.0).scores, base, rtol=1e-12, atol=1e-12)


def test_median_mad_with_half_the_losses_at_the_median_bounds_all_to_it():
    result = median_mad([1.0, 1.0, 1.0, 5.0, -1e300], 3.0)
    assert result.losses.tolist() == [1.0] * 5 and result.scores.tolist() == [0.0] * 5
    assert result.bounded.tolist() == [False, False, False, True, True]


@pytest.mark.parametrize(("losses", "expected"), [
    ([0.5, 0.1, 0.9], [2 / 3, 1 / 3, 1.0]),
    ([2.0, 2.0, 1.0, 3.0], [(1 + 1.5) / 4, (1 + 1.5) / 4, 1 / 4, 1.0]),  # a tie shares its mean rank
    ([-1e300, 7.0], [0.5, 1.0]),
    ([4.0], [1.0]),
])
def test_ranks_are_one_plus_the_rank_over_m_ties_shared(losses, expected):
    np.testing.assert_allclose(ranks(losses), expected, rtol=1e-15)
    np.testing.assert_array_equal(transform_losses(losses, "rank", 3.0).scores, ranks(losses))


def test_an_unknown_transform_is_refused_by_name():
    with pytest.raises(ValueError, match="unknown loss transform 'mad'; allowed: none, median_mad, rank"):
        transform_losses([1.0], "mad", 3.0)
    with pytest.raises(ValueError, match=r"TermFedAvg: loss_transform: Input should be 'auto', 'none', "
                                         r"'median_mad' or 'rank' \(got 'mad'\)"):
        TermFedAvg(loss_transform="mad")
    with pytest.raises(ConfigError, match="strategy.loss_clip"):
        small_scenario("strategy.loss_clip=0")


# --- the default: on for TERM with t < 0 only ----------------------------------


@pytest.mark.parametrize(("make", "expected"), [
    (lambda: TermFedAvg(t=-2.0), "median_mad"), (lambda: TermFedAvg(t=-0.001), "median_mad"),
    (lambda: TermFedAvg(t=0.0), "none"), (lambda: TermFedAvg(t=10.0), "none"), (lambda: QFFL(0.1), "none"),
    (lambda: FedAvg(), "none"), (lambda: TermFedAvg(t=-2.0, loss_transform="none"), "none"),
    (lambda: TermFedAvg(t=3.0, loss_transform="rank"), "rank"), (lambda: QFFL(0.1, loss_transform="median_mad"),
                                                                 "median_mad"),
])
def test_auto_is_median_mad_for_term_with_negative_t_and_none_elsewhere(make, expected):
    assert make().loss_transform == expected


def test_hashes_stay_for_every_strategy_and_t_at_or_above_0_and_move_for_term_below_0():
    for overrides in [(), ("strategy.t=0",), ("strategy.name=qffl",), ("strategy.name=fedavg",),
                      ("strategy.name=afl",), ("strategy.name=krum",)]:
        default = small_scenario(*overrides)
        explicit = small_scenario(*overrides, "strategy.loss_transform=none")
        assert config_hash(default) == config_hash(explicit)  # auto = none: the hash of before
        assert "loss_transform" not in default.strategy_params()
    robust = small_scenario("strategy.t=-2")
    before = small_scenario("strategy.t=-2", "strategy.loss_transform=none")  # what t < 0 ran before
    assert loss_transform_of(robust) == "median_mad" and loss_transform_of(before) == "none"
    assert config_hash(robust) != config_hash(before)
    assert robust.strategy_params()["loss_transform"] == "median_mad" and robust.strategy_params()["loss_clip"] == 3.0
    assert config_hash(small_scenario("strategy.t=-2", "strategy.loss_transform=median_mad")) == config_hash(robust)
    assert config_hash(small_scenario("strategy.t=-2", "strategy.loss_clip=2")) != config_hash(robust)
    assert config_hash(small_scenario("strategy.loss_clip=2")) == config_hash(small_scenario())  # no transform: no c
    # a strategy that reads no loss ignores the transform, and so does its hash
    assert config_hash(small_scenario("strategy.name=fedavg", "strategy.loss_transform=rank")) == config_hash(
        small_scenario("strategy.name=fedavg"))
    assert config_hash(small_scenario("strategy.max_size_ratio=2")) != config_hash(small_scenario())


def test_a_config_json_written_before_the_setting_reads_as_no_transform():
    scenario = small_scenario("strategy.t=-2")
    data = json.loads(scenario.to_json())
    assert data["strategy"]["loss_transform"] == "auto"
    del data["strategy"]["loss_transform"]  # what term-fl wrote before this setting
    old = Scenario.from_json(json.dumps(data))
    assert old.strategy.loss_transform == "none" and loss_transform_of(old) == "none"
    assert Scenario.from_json(scenario.to_json()) == scenario


# --- tilt units: the warning when one client holds the round ----------------------


def mse_replies(scale: float):
    """Four clients whose squared errors spread over thousands (the JAX template's 500-14,000)."""
    losses = [500.0, 3000.0, 9000.0, 14000.0]
    return [mock_reply({"w": np.full(2, float(k))}, {"num-examples": 10, "partition-id": k,
                                                   "train_loss_before": scale * loss}, 10 + k)
            for k, loss in enumerate(losses)]


def rounds(strategy, count: int, scale: float = 1.0):
    for server_round in range(1, count + 1):
        strategy.current_arrays = ArrayRecord({"w": Array(np.zeros(2))})
        strategy.aggregate_train(server_round, mse_replies(scale))
    return strategy


def test_term_warns_once_when_one_client_holds_the_weight_three_rounds_in_a_row(caplog):
    with caplog.at_level(logging.WARNING, logger="flwr"):
        strategy = rounds(TermFedAvg(t=1.0), 2)
        assert "held nearly all of the weight" not in caplog.text  # two rounds are not three
        rounds(strategy, 3)
    warnings = [r.getMessage() for r in caplog.records if "held nearly all of the weight" in r.getMessage()]
    assert len(warnings) == 1 and "effective number of clients 1 / sum p_k^2 = 1 in round 1" in warnings[0]
    assert "loss_transform='median_mad'" in warnings[0] and effective_clients(strategy.last_round.weights) == 1.0


def test_median_mad_makes_the_tilt_the_same_whatever_the_losses_units(caplog):
    scaled = [rounds(TermFedAvg(t=1.0, loss_transform="median_mad"), 1, scale).last_round.weights
              for scale in (1.0, 1e-3)]
    np.testing.assert_allclose(scaled[0], scaled[1], rtol=1e-12)
    assert effective_clients(scaled[0]) > 2.0
    with caplog.at_level(logging.WARNING, logger="flwr"):
        rounds(TermFedAvg(t=1.0, loss_transform="median_mad"), 4)
    assert "held nearly all of the weight" not in caplog.text


def test_effective_clients_is_m_for_equal_weights_and_1_for_one_client():
    assert effective_clients(np.full(5, 0.2)) == pytest.approx(5.0)
    assert effective_clients(np.array([0.0, 2.0, 0.0])) == 1.0
    assert math.isnan(effective_clients(np.zeros(3)))
