"""term-fl's QFFL against Flower 1.42's QFedAvg on identical replies.

Both strategies get the same global model and the same replies (mock replies
as in Flower's own strategy tests, with an integer src_node_id); QFFL is built
with Flower's positional arguments (client_learning_rate, q, train_loss_key).
The new global models must agree to rounding: float64 models to 1e-12,
float32 models to float32 precision (Flower returns those as float64, QFFL
keeps float32: see test_differences_from_flower.py).
"""

from __future__ import annotations

import numpy as np
import pytest
from flwr.app import Array, ArrayRecord
from flwr.serverapp.strategy import QFedAvg
from mock_replies import mock_reply

from term_fl.strategies import QFFL

SHAPES = {"conv.weight": (4, 3, 2), "conv.bias": (4,), "scale": ()}
CASES = [(q, lr, dtype) for q in (0.0, 0.1, 1.0, 2.0, 5.0) for lr in (0.01, 0.1) for dtype in ("float64", "float32")]


def models(seed: int, dtype: str, count: int) -> list[dict[str, np.ndarray]]:
    rng = np.random.default_rng(seed)
    return [{k: rng.normal(size=s).astype(dtype) for k, s in SHAPES.items()} for _ in range(count)]


def run_both(q: float, lr: float, dtype: str, seed: int = 0):
    rng = np.random.default_rng(1000 + seed)
    global_model, *locals_ = models(seed, dtype, 5)
    losses = rng.uniform(0.0, 3.0, size=len(locals_))
    losses[0] = 0.0  # F_k = 0 is allowed (both offset it by 1e-10)
    sizes = rng.integers(1, 50, size=len(locals_))
    results = []
    for strategy in (QFedAvg(lr, q, "train_loss"), QFFL(lr, q, "train_loss")):
        strategy.current_arrays = ArrayRecord({k: Array(v) for k, v in global_model.items()})
        replies = [mock_reply(m, {"num-examples": int(n), "train_loss": float(f)}, 10 + i)
                   for i, (m, n, f) in enumerate(zip(locals_, sizes, losses, strict=True))]
        arrays, _ = strategy.aggregate_train(1, replies)
        results.append(arrays)
    return results


@pytest.mark.parametrize(("q", "lr", "dtype"), CASES)
def test_qffl_equals_flowers_qfedavg(q, lr, dtype):
    flower, ours = run_both(q, lr, dtype)
    assert list(ours.keys()) == list(flower.keys()) == list(SHAPES)
    tolerance = 1e-12 if dtype == "float64" else 2e-6
    for key in SHAPES:
        theirs, mine = flower[key].numpy(), ours[key].numpy()
        assert mine.shape == theirs.shape == SHAPES[key]
        assert mine.dtype == np.dtype(dtype)
        np.testing.assert_allclose(mine, theirs, rtol=tolerance, atol=tolerance)
