"""Where term-fl's strategies deliberately differ from Flower 1.42's, asserted on identical replies.

Each test states the difference, shows what Flower does and what term-fl does
instead (the README's table "Deliberate differences from Flower's strategies"
gives the reasons).
"""

from __future__ import annotations

import inspect

import numpy as np
import pytest
from flwr.app import Array, ArrayRecord
from flwr.serverapp.exception import AggregationError, InconsistentMessageReplies
from flwr.serverapp.strategy import FedAvg as FlowerFedAvg
from flwr.serverapp.strategy import QFedAvg
from mock_replies import mock_reply

from term_fl.plugin.losses import TRAIN_LOSS_BEFORE
from term_fl.strategies import QFFL, FedAvg, TermFedAvg

GLOBAL = {"w": np.array([1.0, 2.0], dtype=np.float32), "bn.num_batches_tracked": np.array(10, dtype=np.int64)}
LOCALS = [
    {"w": np.array([0.0, 1.0], dtype=np.float32), "bn.num_batches_tracked": np.array(13, dtype=np.int64)},
    {"w": np.array([2.0, 0.0], dtype=np.float32), "bn.num_batches_tracked": np.array(14, dtype=np.int64)},
]


def aggregate(strategy, metrics_per_reply, models=LOCALS, global_model=GLOBAL):
    strategy.current_arrays = ArrayRecord({k: Array(v) for k, v in global_model.items()})
    replies = [mock_reply(m, metrics, 100 + i) for i, (m, metrics) in enumerate(zip(models, metrics_per_reply, strict=True))]
    arrays, _ = strategy.aggregate_train(1, replies)
    return None if arrays is None else {k: v.numpy() for k, v in arrays.items()}


def both_losses(key: str):
    return [{"num-examples": 5, key: 1.0}, {"num-examples": 5, key: 2.0}]


# --- the loss key ----------------------------------------------------------------------


def test_default_loss_key_is_train_loss_before_not_flowers_train_loss():
    flower = inspect.signature(QFedAvg).parameters["train_loss_key"].default
    ours = inspect.signature(QFFL).parameters["train_loss_key"].default
    assert (flower, ours) == ("train_loss", TRAIN_LOSS_BEFORE) == ("train_loss", "train_loss_before")
    assert QFFL(0.1).train_loss_key == TermFedAvg(1.0).train_loss_key == FedAvg().train_loss_key == "train_loss_before"


def test_flowers_key_still_works_when_named():
    """A client whose train_loss does mean the pre-training loss keeps working: name the key."""
    ours = aggregate(QFFL(0.1, 1.0, "train_loss"), both_losses("train_loss"))
    assert ours is not None


# --- a missing loss -------------------------------------------------------------------


def test_clients_that_never_send_the_loss_stop_both_with_an_error_naming_the_key():
    metrics = [{"num-examples": 5}, {"num-examples": 5}]
    floats, global_float = [{"w": m["w"]} for m in LOCALS], {"w": GLOBAL["w"]}
    with pytest.raises(AggregationError, match="'train_loss'"):
        aggregate(QFedAvg(0.1, 1.0), metrics, models=floats, global_model=global_float)
    with pytest.raises(AggregationError, match=r"(?s)before local training.*'train_loss_before'.*pre_training_loss"):
        aggregate(QFFL(0.1, 1.0), metrics, models=floats, global_model=global_float)


def test_one_reply_without_the_loss_aborts_flowers_round_but_is_left_out_by_term_fl(caplog):
    metrics = [{"num-examples": 5, "train_loss": 1.0}, {"num-examples": 5}]
    floats, global_float = [{"w": m["w"]} for m in LOCALS], {"w": GLOBAL["w"]}
    with pytest.raises(InconsistentMessageReplies):
        aggregate(QFedAvg(0.1, 1.0), metrics, models=floats, global_model=global_float)
    ours = aggregate(QFFL(0.1, 1.0, "train_loss"), metrics, models=floats, global_model=global_float)
    assert ours is not None
    assert "missing metric 'train_loss'" in caplog.text


# --- dtypes -------------------------------------------------------------------------


def test_integer_buffers_keep_their_dtype_where_flowers_fedavg_makes_them_float64():
    metrics = [{"num-examples": 1}, {"num-examples": 3}]
    flower = aggregate(FlowerFedAvg(), metrics)
    ours = aggregate(FedAvg(), metrics)
    key = "bn.num_batches_tracked"
    assert flower[key].dtype == np.float64 and flower[key] == pytest.approx(13.75)
    assert ours[key].dtype == np.int64 and ours[key].shape == () and ours[key] == 14  # rint(13.75)
    np.testing.assert_array_equal(ours["w"], flower["w"])


def test_flowers_qfedavg_cannot_aggregate_integer_buffers_qffl_can():
    with pytest.raises(TypeError):  # numpy refuses Flower's in-place float update of an int64 array
        aggregate(QFedAvg(0.1, 1.0), both_losses("train_loss"))
    ours = aggregate(QFFL(0.1, 1.0, "train_loss"), both_losses("train_loss"))
    assert ours["bn.num_batches_tracked"].dtype == np.int64 and ours["bn.num_batches_tracked"].shape == ()


def test_float32_models_stay_float32_where_flowers_qfedavg_returns_float64():
    floats = [{"w": m["w"]} for m in LOCALS]
    flower = aggregate(QFedAvg(0.1, 1.0), both_losses("train_loss"), models=floats, global_model={"w": GLOBAL["w"]})
    ours = aggregate(QFFL(0.1, 1.0, "train_loss"), both_losses("train_loss"), models=floats,
                     global_model={"w": GLOBAL["w"]})
    assert flower["w"].dtype == np.float64 and ours["w"].dtype == np.float32
    np.testing.assert_allclose(ours["w"], flower["w"], rtol=1e-6)


# --- bad replies --------------------------------------------------------------------


def test_an_inconsistent_reply_aborts_flowers_fedavg_round_but_is_left_out_by_term_fl(caplog):
    metrics = [{"num-examples": 1}, {"samples": 3}]  # the second client sends another key
    with pytest.raises(InconsistentMessageReplies):
        aggregate(FlowerFedAvg(), metrics)
    ours = aggregate(FedAvg(), metrics)
    np.testing.assert_array_equal(ours["w"], LOCALS[0]["w"])
    assert "missing metric 'num-examples'" in caplog.text
