"""term-fl's FedMedian, FedTrimmedAvg and Krum against Flower 1.42's own on identical replies.

Both strategies get the same replies (mock replies as in Flower's own
strategy tests, a fresh set for each: Flower's FedMedian and FedTrimmedAvg
empty the replies' ArrayRecords as they read them). Where the results may
differ, and why:

- median: equal bit for bit (numpy's median is the mean of the same one or
  two middle values, and (a + b) / 2 rounds the same in float32 and in
  float64 cast to float32);
- trimmed mean: to float rounding (Flower averages the kept values in the
  order ``np.partition`` leaves them and float32 models in float32; term-fl
  in sorted order, in float64, cast back);
- Krum / multi-Krum: the same selection on models whose scores are well
  apart (Flower's float32 distances ||a||^2 + ||b||^2 - 2 a.b round by more
  than close scores differ); the average of the selected models to float
  rounding (Flower sums in score order in the models' dtype).
"""

from __future__ import annotations

import inspect

import numpy as np
import pytest
from flwr.serverapp.strategy import FedMedian as FlowerFedMedian
from flwr.serverapp.strategy import FedTrimmedAvg as FlowerFedTrimmedAvg
from flwr.serverapp.strategy import Krum as FlowerKrum
from flwr.serverapp.strategy import MultiKrum as FlowerMultiKrum
from mock_replies import mock_reply

from term_fl.strategies import FedMedian, FedTrimmedAvg, Krum

SHAPES = {"conv.weight": (4, 3, 2), "conv.bias": (4,), "scale": ()}


def models(count: int, dtype: str, seed: int = 0) -> list[dict[str, np.ndarray]]:
    rng = np.random.default_rng(seed)
    return [{k: rng.normal(size=s).astype(dtype) for k, s in SHAPES.items()} for _ in range(count)]


def replies(locals_: list[dict[str, np.ndarray]], sizes=None) -> list:
    sizes = sizes if sizes is not None else [10 + 3 * i for i in range(len(locals_))]
    return [mock_reply({k: v.copy() for k, v in m.items()}, {"num-examples": int(n), "partition-id": i}, 100 + i)
            for i, (m, n) in enumerate(zip(locals_, sizes, strict=True))]


def both(flower, ours, locals_, sizes=None):
    theirs, _ = flower.aggregate_train(1, replies(locals_, sizes))
    mine, _ = ours.aggregate_train(1, replies(locals_, sizes))
    assert list(mine.keys()) == list(SHAPES)
    return {k: theirs[k].numpy() for k in SHAPES}, {k: mine[k].numpy() for k in SHAPES}, ours.last_round


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("count", [1, 2, 5, 6, 9])
def test_median_equals_flowers_fedmedian_bit_for_bit(count, dtype):
    theirs, mine, report = both(FlowerFedMedian(), FedMedian(), models(count, dtype))
    for key in SHAPES:
        assert mine[key].dtype == np.dtype(dtype) and mine[key].shape == SHAPES[key]
        np.testing.assert_array_equal(mine[key], theirs[key].astype(dtype))
    assert report.weights.sum() == pytest.approx(1.0, abs=1e-12)


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize(("count", "beta"), [(4, 0.2), (5, 0.2), (7, 0.3), (10, 0.2), (10, 0.0), (10, 0.45), (30, 0.1)])
def test_trimmed_mean_equals_flowers_fedtrimmedavg_to_float_rounding(count, beta, dtype):
    theirs, mine, report = both(FlowerFedTrimmedAvg(beta=beta), FedTrimmedAvg(beta=beta), models(count, dtype))
    tolerance = 1e-13 if dtype == "float64" else 1e-6
    for key in SHAPES:
        assert mine[key].dtype == np.dtype(dtype)
        np.testing.assert_allclose(mine[key], theirs[key], rtol=tolerance, atol=tolerance)
    assert report.weights.sum() == pytest.approx(1.0, abs=1e-12)


def outliers_and_honest(dtype: str) -> list[dict[str, np.ndarray]]:
    """7 models near one point and 2 far from it (and from each other): Krum's scores are far apart."""
    rng = np.random.default_rng(3)
    centre = {k: rng.normal(size=s) for k, s in SHAPES.items()}
    honest = [{k: (v + 0.1 * rng.normal(size=v.shape)).astype(dtype) for k, v in centre.items()} for _ in range(7)]
    far = [{k: (v + scale * rng.normal(size=v.shape)).astype(dtype) for k, v in centre.items()} for scale in (20, 50)]
    return [*honest[:3], far[0], *honest[3:], far[1]]


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize(("malicious", "keep"), [(0, 1), (2, 1), (2, 3), (3, 5), (0, 9)])
def test_krum_selects_and_averages_as_flowers_krum_and_multikrum(malicious, keep, dtype):
    flower = (FlowerKrum(num_malicious_nodes=malicious) if keep == 1
              else FlowerMultiKrum(num_malicious_nodes=malicious, num_nodes_to_select=keep))
    locals_ = outliers_and_honest(dtype)
    theirs, mine, report = both(flower, Krum(num_malicious_nodes=malicious, num_nodes_to_select=keep), locals_)
    tolerance = 1e-13 if dtype == "float64" else 2e-6
    for key in SHAPES:
        assert mine[key].dtype == np.dtype(dtype)
        np.testing.assert_allclose(mine[key], theirs[key], rtol=tolerance, atol=tolerance)
    selected = np.flatnonzero(report.weights)
    assert selected.size == keep and report.weights.sum() == pytest.approx(1.0, abs=1e-12)
    if keep < 8:
        assert 3 not in selected and 8 not in selected  # the two far models


def params(cls) -> list[inspect.Parameter]:
    return [p for name, p in inspect.signature(cls).parameters.items() if name != "self"]


@pytest.mark.parametrize(("ours", "theirs"), [(FedMedian, FlowerFedMedian), (FedTrimmedAvg, FlowerFedTrimmedAvg),
                                              (Krum, FlowerKrum)])
def test_constructors_take_flowers_arguments_in_order_then_keywords(ours, theirs):
    mine, flowers = params(ours), params(theirs)
    for o, t in zip(mine, flowers, strict=False):
        assert (o.name, o.kind, o.default) == (t.name, t.kind, t.default)
    assert all(p.kind in (inspect.Parameter.KEYWORD_ONLY, inspect.Parameter.VAR_KEYWORD) for p in mine[len(flowers):])
