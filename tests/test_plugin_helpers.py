"""term_fl.plugin: the NumPy loss helper, the batch rules every helper shares, train_metrics, lazy imports.

The scikit-learn and JAX helpers are tested in tests/plugin_apps (their
frameworks live in the venv of scripts/plugin_apps.sh); PyTorch's in
tests/test_client_loss.py.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch
from flwr.app import MetricRecord
from torch import nn

from term_fl.common import keys
from term_fl.plugin import PreTrainingLoss, train_metrics
from term_fl.plugin import pre_training_loss as torch_pre_training_loss
from term_fl.plugin.batches import batch_total
from term_fl.plugin.numpy_loss import pre_training_loss


def linear_data(n: int = 11, seed: int = 0) -> tuple[np.ndarray, np.ndarray, list[np.ndarray]]:
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, 3))
    y = rng.normal(size=n)
    return x, y, [rng.normal(size=3), np.array(0.5)]


def squared_errors(params, x, y):
    """One loss per sample: (x w + b - y)^2."""
    return (x @ params[0] + params[1] - y) ** 2


def naive_mean(params, x, y) -> float:
    """The reference: every sample's loss by itself, averaged in Python."""
    losses = [float((x[i] @ params[0] + params[1] - y[i]) ** 2) for i in range(len(y))]
    return sum(losses) / len(losses)


def split(x, y, sizes):
    out, start = [], 0
    for size in sizes:
        out.append((x[start:start + size], y[start:start + size]))
        start += size
    return out


@pytest.mark.parametrize("kind", ["per-sample", "mean", "sum"])
def test_numpy_loss_is_the_mean_over_samples_whatever_the_batches_and_the_reduction(kind):
    x, y, params = linear_data(11)
    loss_fn = {
        "per-sample": squared_errors,
        "mean": lambda p, xb, yb: np.mean(squared_errors(p, xb, yb)),
        "sum": lambda p, xb, yb: np.sum(squared_errors(p, xb, yb)),
    }[kind]
    reduction = "sum" if kind == "sum" else "mean"
    value = pre_training_loss(params, split(x, y, [4, 4, 0, 3]), loss_fn, reduction=reduction)
    assert value == pytest.approx(naive_mean(params, x, y), rel=1e-12)
    assert pre_training_loss(params, [(x, y)], loss_fn, reduction=reduction) == pytest.approx(value, rel=1e-12)


def test_numpy_loss_with_sum_gives_the_mean_the_total_and_the_samples():
    x, y, params = linear_data(9)
    result = pre_training_loss(params, split(x, y, [5, 4]), squared_errors, with_sum=True)
    assert isinstance(result, PreTrainingLoss)
    assert result.num_examples == 9
    assert result.total == pytest.approx(float(np.sum(squared_errors(params, x, y))), rel=1e-12)
    assert result.mean == pytest.approx(naive_mean(params, x, y), rel=1e-12)


def test_numpy_loss_leaves_the_weights_as_they_were():
    x, y, params = linear_data(6)
    before = [p.copy() for p in params]
    pre_training_loss(params, [(x, y)], squared_errors)
    for old, new in zip(before, params, strict=True):
        np.testing.assert_array_equal(old, new)


def test_numpy_loss_reads_mapping_batches_with_keys():
    x, y, params = linear_data(8)
    batches = [{"img": xb, "label": yb} for xb, yb in split(x, y, [5, 3])]
    value = pre_training_loss(params, batches, squared_errors, keys=("img", "label"))
    assert value == pytest.approx(naive_mean(params, x, y), rel=1e-12)


def test_mapping_batches_without_keys_name_the_keys_found_and_the_keys_form():
    x, y, params = linear_data(4)
    with pytest.raises(ValueError, match=r"keys \['img', 'label'\].*keys=\('img', 'label'\)"):
        pre_training_loss(params, [{"img": x, "label": y}], squared_errors)


def test_a_key_the_batches_lack_is_named_with_the_keys_they_have():
    x, y, params = linear_data(4)
    with pytest.raises(ValueError, match=r"no key 'image'; their keys: \['img', 'label'\]"):
        pre_training_loss(params, [{"img": x, "label": y}], squared_errors, keys=("image", "label"))
    with pytest.raises(ValueError, match=r"keys must be \(INPUT_KEY, TARGET_KEY\)"):
        pre_training_loss(params, [{"img": x, "label": y}], squared_errors, keys=("img",))


def test_bad_data_and_bad_results_are_clear_errors():
    x, y, params = linear_data(5)
    with pytest.raises(ValueError, match="no sample"):
        pre_training_loss(params, [], squared_errors)
    with pytest.raises(ValueError, match="no sample"):
        pre_training_loss(params, [(x[:0], y[:0])], squared_errors)
    with pytest.raises(ValueError, match=r"\(inputs, targets\)"):
        pre_training_loss(params, [x], squared_errors)
    with pytest.raises(ValueError, match=r"shape \(2,\) for a batch of 5 samples"):
        pre_training_loss(params, [(x, y)], lambda p, xb, yb: np.ones(2))
    with pytest.raises(ValueError, match="reduction must be 'mean' or 'sum'"):
        pre_training_loss(params, [(x, y)], squared_errors, reduction="none")


def test_a_nan_loss_is_returned_for_the_strategies_to_exclude():
    x, y, params = linear_data(3)
    assert np.isnan(pre_training_loss(params, [(x, y)], lambda p, xb, yb: np.full(len(yb), np.nan)))


def test_batch_total_against_hand_computed_values():
    assert batch_total(np.float32(2.5), 4) == 10.0  # a mean of 4 samples
    assert batch_total(2.5, 4, "sum") == 2.5
    assert batch_total(np.array([1.0, 2.0, 4.0]), 3) == 7.0
    assert batch_total(np.ones((2, 3)), 2) == 6.0  # per sample and per position: all summed


def test_torch_loss_with_sum_is_the_sum_of_the_per_sample_losses():
    torch.manual_seed(0)
    model = nn.Linear(4, 3)
    x, y = torch.randn(7, 4), torch.randint(0, 3, (7,))
    result = torch_pre_training_loss(model, [(x[:4], y[:4]), (x[4:], y[4:])], nn.CrossEntropyLoss(), with_sum=True)
    with torch.no_grad():
        per_sample = [float(nn.functional.cross_entropy(model(x[i:i + 1]), y[i:i + 1])) for i in range(7)]
    assert result.num_examples == 7
    assert result.total == pytest.approx(sum(per_sample), rel=1e-6)
    assert result.mean == pytest.approx(sum(per_sample) / 7, rel=1e-6)


def test_train_metrics_spells_the_keys_the_strategies_read():
    assert train_metrics(0.25) == {keys.TRAIN_LOSS_BEFORE: 0.25}
    metrics = train_metrics(PreTrainingLoss(0.25, 2.5, 10), num_examples=10, partition_id=3)
    assert metrics == {"train_loss_before": 0.25, "train_loss_before_sum": 2.5, "num-examples": 10, "partition-id": 3}
    assert dict(MetricRecord(metrics)) == metrics  # a valid MetricRecord
    assert train_metrics(np.float32(0.5), num_examples=np.int64(4)) == {"train_loss_before": 0.5, "num-examples": 4}


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: train_metrics("0.3"), "loss_before must be the float"),
        (lambda: train_metrics(True), "loss_before must be the float"),
        (lambda: train_metrics(0.3, num_examples=-1), "num_examples must be a non-negative int, got -1"),
        (lambda: train_metrics(0.3, num_examples=2.0), "num_examples must be a non-negative int, got 2.0"),
        (lambda: train_metrics(0.3, partition_id=True), "partition_id must be a non-negative int, got True"),
    ],
)
def test_train_metrics_refuses_what_is_not_a_loss_or_a_count(call, message):
    with pytest.raises(ValueError, match=message):
        call()


def test_importing_the_plugin_and_its_numpy_helper_loads_no_torch_jax_or_sklearn():
    code = textwrap.dedent(
        """
        import sys
        import term_fl.plugin as plugin
        plugin.train_metrics, plugin.PreTrainingLoss, plugin.TRAIN_LOSS_BEFORE_SUM
        import term_fl.plugin.numpy_loss, term_fl.plugin.metrics
        print(sorted(m for m in ("torch", "jax", "sklearn", "flax") if m in sys.modules))
        plugin.pre_training_loss
        print("torch" in sys.modules)
        """
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split("\n")[:2] == ["[]", "True"]  # PyTorch's helper, and only it, loads torch
