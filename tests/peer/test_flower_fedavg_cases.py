# Copyright 2025 Flower Labs GmbH. All Rights Reserved.
#
# Licensed under the Apache License, Version 2.0 (the "License");
# you may not use this file except in compliance with the License.
# You may obtain a copy of the License at
#
#     http://www.apache.org/licenses/LICENSE-2.0
#
# Unless required by applicable law or agreed to in writing, software
# distributed under the License is distributed on an "AS IS" BASIS,
# WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
# See the License for the specific language governing permissions and
# limitations under the License.
# ==============================================================================
# Modified by the term-fl authors: only the class under test is swapped and the
# mock replies carry an integer src_node_id (and, for TermFedAvg, the loss).
"""Flower 1.42's own FedAvg strategy test cases, run against term-fl's FedAvg and TermFedAvg(t=0).

The cases are those of Flower's Message-API FedAvgM tests,
``framework/py/flwr/serverapp/strategy/fedavgm_test.py`` in
github.com/flwrlabs/flower (Copyright 2025 Flower Labs GmbH, Apache-2.0; last
changed in 7851413d11 "Handle scalar arrays in strategies and mods" (#6783),
the version that matches flwr 1.42.0's strategies), with the mock reply of
``strategy_utils_test.py``. FedAvgM with a server learning rate of 1 (Flower's
tests use 1 + 1e-9) and no momentum is FedAvg. Each case keeps Flower's
inputs, steps and assertions (under Flower's license header, above) and runs
against Flower's own ``FedAvgM`` as well, so a copy that drifted from
Flower's test would fail there first. Only the class under test changes,
and, as the issue asked, the mock replies carry the integer ``src_node_id``
a real reply always carries (Flower's mocks leave it a ``Mock``); TermFedAvg's mocks also carry the pre-training loss. term-fl's
FedAvg gets no loss at all: it needs none.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
from flwr.app import ArrayRecord, Message
from flwr.serverapp.strategy import FedAvgM
from mock_replies import mock_reply

from term_fl.plugin.losses import TRAIN_LOSS_BEFORE
from term_fl.strategies import FedAvg, TermFedAvg

# name -> (the class under test, whether its mock replies carry the loss)
UNDER_TEST: dict[str, tuple[Callable[..., object], bool]] = {
    "flwr.FedAvgM": (FedAvgM, False),
    "term_fl.FedAvg": (FedAvg, False),
    "term_fl.TermFedAvg(t=0)": (lambda **kwargs: TermFedAvg(t=0.0, **kwargs), True),
}
_node_ids = iter(range(1001, 10**6))


def create_mock_reply(arrays: ArrayRecord, num_examples: float, with_loss: bool) -> Message:
    """Flower's mock reply (strategy_utils_test.create_mock_reply) with an integer src_node_id."""
    metrics = {"num-examples": num_examples}
    if with_loss:
        metrics[TRAIN_LOSS_BEFORE] = 0.5 + num_examples  # any finite loss: t = 0 ignores its value
    return mock_reply(arrays, metrics, next(_node_ids))


@pytest.fixture(params=list(UNDER_TEST), ids=list(UNDER_TEST))
def under_test(request):
    return UNDER_TEST[request.param]


def _prepare_strategy(under_test):
    """Flower's _prepare_strategy: two clients, 1 and 2 examples, a two-array model."""
    cls, with_loss = under_test
    weights0_0 = np.array([[1, 2, 3], [4, 5, 6]], dtype=np.float32)
    weights0_1 = np.array([7, 8, 9, 10], dtype=np.float32)
    weights1_0 = np.array([[29, 23, 19], [17, 13, 11]], dtype=np.float32)
    weights1_1 = np.array([7, 5, 3, 2], dtype=np.float32)
    replies = [
        create_mock_reply(ArrayRecord([weights0_0, weights0_1]), num_examples=1, with_loss=with_loss),
        create_mock_reply(ArrayRecord([weights1_0, weights1_1]), num_examples=2, with_loss=with_loss),
    ]
    expected = [(weights0_0 * 1 + weights1_0 * 2) / 3, (weights0_1 * 1 + weights1_1 * 2) / 3]
    initial_weights = [np.zeros((2, 3), dtype=np.float32), np.zeros(4, dtype=np.float32)]
    strategy = cls()
    strategy.current_arrays = ArrayRecord(initial_weights)
    return strategy, replies, expected


def test_aggregate_fit_using_near_one_server_lr_and_no_momentum(under_test):
    strategy, replies, expected = _prepare_strategy(under_test)
    strategy.server_learning_rate = 1.0 + 1e-9

    actual, _ = strategy.aggregate_train(1, replies)

    assert actual is not None
    for w_act, w_exp in zip(actual.to_numpy_ndarrays(), expected, strict=True):
        np.testing.assert_almost_equal(w_act, w_exp, decimal=5)


def test_aggregate_fit_server_learning_rate_and_momentum(under_test):
    strategy, replies, expected = _prepare_strategy(under_test)
    strategy.server_learning_rate = 1.0 + 1e-9
    strategy.server_momentum = 1e-9

    actual, _ = strategy.aggregate_train(1, replies)  # first round (activates FedAvgM's momentum)
    actual, _ = strategy.aggregate_train(2, replies)  # second round (updates it)

    assert actual is not None
    for w_act, w_exp in zip(actual.to_numpy_ndarrays(), expected, strict=True):
        np.testing.assert_almost_equal(w_act, w_exp, decimal=5)


def test_aggregate_fit_with_scalar_weights(under_test):
    cls, with_loss = under_test
    strategy = cls(server_learning_rate=1.0 + 1e-9)
    strategy.current_arrays = ArrayRecord([np.array(0.0)])
    replies = [
        create_mock_reply(ArrayRecord([np.array(1.0)]), num_examples=1, with_loss=with_loss),
        create_mock_reply(ArrayRecord([np.array(3.0)]), num_examples=2, with_loss=with_loss),
    ]

    actual, _ = strategy.aggregate_train(1, replies)

    assert actual is not None
    scalar_weight = actual.to_numpy_ndarrays()[0]
    assert scalar_weight.shape == ()
    np.testing.assert_allclose(scalar_weight, np.array(7.0 / 3.0), rtol=1e-6)
