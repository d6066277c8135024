"""The strategies as drop-ins for Flower's: constructors, the loss key, a missing loss, array shapes and dtypes."""

from __future__ import annotations

import inspect

import numpy as np
import pytest
from flwr.app import Array, ArrayRecord
from flwr.serverapp.exception import AggregationError
from flwr.serverapp.strategy import FedAvg as FlowerFedAvg
from flwr.serverapp.strategy import FedAvgM as FlowerFedAvgM
from flwr.serverapp.strategy import QFedAvg as FlowerQFedAvg
from mock_replies import mock_reply

from conftest import small_scenario
from term_fl.federation.loop import build_scenario_strategy
from term_fl.common.keys import TRAIN_LOSS_BEFORE
from term_fl.strategies import AFL, QFFL, FedAvg, TermFedAvg

FLOWER_FEDAVG = list(inspect.signature(FlowerFedAvg).parameters.values())


def params(cls) -> list[inspect.Parameter]:
    return list(inspect.signature(cls).parameters.values())


def same(ours: inspect.Parameter, theirs: inspect.Parameter) -> bool:
    return (ours.name, ours.kind, ours.default) == (theirs.name, theirs.kind, theirs.default)


# --- constructors ------------------------------------------------------------------------


def test_fedavg_takes_flowers_fedavg_arguments_in_order_then_keywords():
    ours = params(FedAvg)
    assert all(same(o, t) for o, t in zip(ours, FLOWER_FEDAVG, strict=False))
    assert all(p.kind is inspect.Parameter.KEYWORD_ONLY for p in ours[len(FLOWER_FEDAVG):])
    assert inspect.signature(FedAvg).parameters["train_loss_key"].default == TRAIN_LOSS_BEFORE


def test_qffl_takes_flowers_qfedavg_arguments_in_order_only_the_loss_key_default_differs():
    ours, theirs = params(QFFL), params(FlowerQFedAvg)
    for o, t in zip(ours, theirs, strict=False):
        if o.name == "train_loss_key":
            assert (o.kind, o.default, t.default) == (t.kind, "train_loss_before", "train_loss")
        else:
            assert same(o, t), (o, t)
    extra = ours[len(theirs):]  # term-fl's own: keywords only (loss_reduction, then **kwargs)
    assert [p.name for p in extra] == ["loss_reduction", "kwargs"]
    assert [p.kind for p in extra] == [inspect.Parameter.KEYWORD_ONLY, inspect.Parameter.VAR_KEYWORD]


def test_term_takes_t_and_the_loss_key_then_flowers_fedavg_arguments():
    ours = params(TermFedAvg)
    assert [p.name for p in ours[:2]] == ["t", "train_loss_key"]
    assert all(same(o, t) for o, t in zip(ours[2:], FLOWER_FEDAVG, strict=False))
    assert all(p.kind in (inspect.Parameter.KEYWORD_ONLY, inspect.Parameter.VAR_KEYWORD)
               for p in ours[2 + len(FLOWER_FEDAVG):])


def test_positional_construction_as_with_flower():
    term = TermFedAvg(0.5, None, 0.5, 0.0, 3)
    assert (term.t, term.train_loss_key, term.fraction_train, term.fraction_evaluate, term.min_train_nodes) == (
        0.5, "train_loss_before", 0.5, 0.0, 3)
    qffl = QFFL(0.1, 1.0, "train_loss", 0.3)
    assert (qffl.client_learning_rate, qffl.q, qffl.train_loss_key, qffl.fraction_train) == (0.1, 1.0, "train_loss", 0.3)
    assert FedAvg(0.2, 0.4, 5).min_train_nodes == 5
    assert QFFL(0.1).q == FlowerQFedAvg(0.1).q == 0.1


def test_summed_losses_default_to_their_own_key():
    assert TermFedAvg(1.0, loss_reduction="sum").train_loss_key == "train_loss_before_sum"
    assert TermFedAvg(1.0, "my_loss", loss_reduction="sum").train_loss_key == "my_loss"


def test_scenarios_map_their_parameter_names_to_flowers_argument_names():
    term = build_scenario_strategy(small_scenario("strategy.name=term", "strategy.server_lr=0.5"), 6)
    qffl = build_scenario_strategy(small_scenario("strategy.name=qffl", "client.lr=0.03"), 6)
    assert term.server_learning_rate == 0.5 and qffl.client_learning_rate == 0.03


@pytest.mark.parametrize("bad", [0.0, -1.0, float("nan"), "1"])
def test_server_learning_rate_must_be_positive(bad):
    with pytest.raises(ValueError, match="server_learning_rate must be a positive number"):
        FedAvg(server_learning_rate=bad)


# --- the loss ----------------------------------------------------------------------------

W0 = {"w": np.zeros(3, dtype=np.float32)}
LOCAL = [{"w": np.array([1.0, 2.0, 3.0], dtype=np.float32)}, {"w": np.array([3.0, 2.0, 1.0], dtype=np.float32)}]


def aggregate(strategy, metrics, models=LOCAL, global_model=W0, server_round=1):
    strategy.current_arrays = ArrayRecord({k: Array(v) for k, v in global_model.items()})
    replies = [mock_reply(m, x, 10 + i) for i, (m, x) in enumerate(zip(models, metrics, strict=True))]
    return strategy.aggregate_train(server_round, replies)


def test_fedavg_needs_no_loss_and_equals_flowers_fedavg():
    metrics = [{"num-examples": 1}, {"num-examples": 3}]
    ours, _ = aggregate(FedAvg(), metrics)
    theirs, _ = aggregate(FlowerFedAvg(), metrics)
    np.testing.assert_array_equal(ours["w"].numpy(), theirs["w"].numpy())


def test_fedavg_records_the_loss_when_sent_nan_otherwise():
    strategy = FedAvg()
    aggregate(strategy, [{"num-examples": 1, "train_loss_before": 0.25}, {"num-examples": 3}])
    np.testing.assert_array_equal(strategy.last_round.losses, [0.25, np.nan])
    assert strategy.last_round.excluded == []


def test_fedavg_logs_f_k_only_for_replies_that_sent_it_at_debug_and_one_info_line_per_round(caplog):
    with caplog.at_level("DEBUG", logger="flwr"):
        aggregate(FedAvg(), [{"num-examples": 1, "train_loss_before": 0.25}, {"num-examples": 3}])
    lines = [(r.levelname, r.getMessage()) for r in caplog.records if "> node" in r.getMessage()]
    assert lines == [("DEBUG", "\t> node 10 (no partition-id): F_k = 0.25, weight 0.25"),
                     ("DEBUG", "\t> node 11 (no partition-id): weight 0.75")]
    rounds = [r.getMessage() for r in caplog.records if r.levelname == "INFO" and "round 1:" in r.getMessage()]
    assert rounds == ["aggregate_train: round 1: 2 replies aggregated, 0 excluded; weights 0.25..0.75, "
                      "effective clients 1.6"]


NEEDS_LOSS = {
    "TermFedAvg(t=0)": lambda: TermFedAvg(0.0),
    "TermFedAvg(t=1)": lambda: TermFedAvg(1.0),
    "QFFL": lambda: QFFL(0.1),
    "AFL": lambda: AFL(),
}


@pytest.mark.parametrize("make", NEEDS_LOSS.values(), ids=NEEDS_LOSS.keys())
def test_a_round_without_any_loss_is_an_error_that_says_what_to_add(make):
    strategy = make()
    with pytest.raises(AggregationError) as info:
        aggregate(strategy, [{"num-examples": 1, "train_loss": 0.5}, {"num-examples": 3, "train_loss": 0.7}])
    message = str(info.value)
    assert "'train_loss_before'" in message
    assert "loss of the received global model on the client's training data, measured before local training" in message
    assert "loss_before = pre_training_loss(model, trainloader, loss_fn)" in message
    assert "metrics.update(train_metrics(loss_before))" in message
    assert 'keys=("img", "label")' in message, "Flower Datasets' dict batches"
    assert type(strategy).__name__ in message and "round 1" in message
    assert strategy.last_round is None, "nothing recorded for a misconfigured round"


def test_the_error_for_summed_losses_shows_with_sum_and_another_key_is_set_by_hand():
    with pytest.raises(AggregationError) as info:
        aggregate(TermFedAvg(1.0, loss_reduction="sum"), [{"num-examples": 1}, {"num-examples": 3}])
    assert "pre_training_loss(model, trainloader, loss_fn, with_sum=True)" in str(info.value)
    assert "'train_loss_before_sum'" in str(info.value)
    with pytest.raises(AggregationError) as info:
        aggregate(TermFedAvg(1.0, train_loss_key="my_loss"), [{"num-examples": 1}, {"num-examples": 3}])
    assert 'metrics["my_loss"] = loss_before' in str(info.value)


def test_the_error_names_the_configured_key():
    with pytest.raises(AggregationError, match="'my_loss'"):
        aggregate(TermFedAvg(1.0, "my_loss"), [{"num-examples": 1}, {"num-examples": 3}])


def test_only_error_replies_are_a_failed_round_not_a_missing_loss():
    strategy = TermFedAvg(1.0)
    strategy.current_arrays = ArrayRecord({k: Array(v) for k, v in W0.items()})
    error = mock_reply(LOCAL[0], {"num-examples": 1}, 3)
    error.has_error.side_effect = lambda: True
    assert strategy.aggregate_train(1, [error]) == (None, None)


# --- shapes and dtypes -----------------------------------------------------------------


MODEL = {
    "conv.weight": np.zeros((2, 3), dtype=np.float32),
    "bn.running_mean": np.zeros(2, dtype=np.float32),
    "bn.num_batches_tracked": np.array(0, dtype=np.int64),
    "scale": np.array(1.0, dtype=np.float64),
    "flag": np.array(False),
}


def local_model(seed: int, counter: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {
        "conv.weight": rng.normal(size=(2, 3)).astype(np.float32),
        "bn.running_mean": rng.normal(size=2).astype(np.float32),
        "bn.num_batches_tracked": np.array(counter, dtype=np.int64),
        "scale": np.array(rng.normal()),
        "flag": np.array(seed % 2 == 0),
    }


ALL = {
    "FedAvg": FedAvg,
    "TermFedAvg": lambda: TermFedAvg(1.0),
    "QFFL": lambda: QFFL(0.1, 1.0),
    "AFL": lambda: AFL(),
}


@pytest.mark.parametrize("make", ALL.values(), ids=ALL.keys())
def test_every_array_keeps_its_shape_and_dtype_round_after_round(make):
    """A 0-d int64 counter (BatchNorm's num_batches_tracked) used to come back as shape (1,): from round 2 every reply was excluded."""
    strategy = make()
    strategy.set_node_partitions({10: 0, 11: 1, 12: 2})
    global_model = MODEL
    for server_round in (1, 2, 3):
        metrics = [{"num-examples": n, "partition-id": p, "train_loss_before": f}
                   for n, p, f in ((10, 0, 0.5), (20, 1, 1.5), (30, 2, 1.0))]
        models = [local_model(100 * server_round + p, counter=4 * server_round + p) for p in range(3)]
        arrays, _ = aggregate(strategy, metrics, models=models, global_model=global_model, server_round=server_round)
        assert arrays is not None and strategy.last_round.excluded == [], strategy.last_round.excluded
        out = {k: v.numpy() for k, v in arrays.items()}
        assert list(out) == list(MODEL)
        for key, template in MODEL.items():
            assert (out[key].shape, out[key].dtype) == (template.shape, template.dtype), key
        global_model = out


def test_integer_buffers_are_the_rounded_weighted_average():
    """FedAvg of counters 13 (n = 1) and 14 (n = 3): 13.75, rounded to 14 in int64 (Flower gives float64 13.75)."""
    models = [{**MODEL, "bn.num_batches_tracked": np.array(13)}, {**MODEL, "bn.num_batches_tracked": np.array(14)}]
    arrays, _ = aggregate(FedAvg(), [{"num-examples": 1}, {"num-examples": 3}], models=models, global_model=MODEL)
    counter = arrays["bn.num_batches_tracked"].numpy()
    assert counter.dtype == np.int64 and counter.shape == () and int(counter) == 14


# --- server learning rate ----------------------------------------------------------------


def test_fedavg_with_a_server_learning_rate_is_flowers_fedavgm_without_momentum():
    metrics = [{"num-examples": 1}, {"num-examples": 3}]
    start = {"w": np.array([1.0, -1.0, 0.5], dtype=np.float32)}
    ours, _ = aggregate(FedAvg(server_learning_rate=0.3), metrics, global_model=start)
    theirs, _ = aggregate(FlowerFedAvgM(server_learning_rate=0.3), metrics, global_model=start)
    np.testing.assert_allclose(ours["w"].numpy(), theirs["w"].numpy(), rtol=1e-6)


def test_server_learning_rate_scales_the_applied_weights():
    metrics = [{"num-examples": 1, "train_loss_before": 0.5}, {"num-examples": 3, "train_loss_before": 2.0}]
    plain, stepped = TermFedAvg(1.0), TermFedAvg(1.0, server_learning_rate=0.5)
    aggregate(plain, metrics)
    aggregate(stepped, metrics)
    np.testing.assert_allclose(stepped.last_round.weights, 0.5 * plain.last_round.weights, rtol=1e-15)
