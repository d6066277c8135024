"""The pre-training loss F_k of a JAX or Flax model.

For a ClientApp whose model is a pytree of JAX arrays with a pure loss
function, as in Flower's JAX template (``loss_fn(params, X, y)``), or a Flax
model:

- Flax Linen: ``params`` are the variables, the loss applies the module::

      def loss_fn(variables, x, y):
          logits = model.apply(variables, x, train=False)   # eval mode: dropout off, running statistics
          return optax.softmax_cross_entropy_with_integer_labels(logits, y)   # one loss per sample

- Flax NNX: pass the module itself, switched to eval mode first
  (``model.eval()``; ``model.train()`` before local training), with
  ``loss_fn(model, x, y)``.

Every batch's result is brought to the host with ``jax.device_get`` and
summed in float64, so a float32 or bfloat16 loss loses nothing in the sum.
``loss_fn`` may be ``jax.jit``-compiled. Importing this module imports jax.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Literal, overload

import jax
import numpy as np

from .batches import BatchReduction, PreTrainingLoss
from .numpy_loss import LossFn, evaluate_batches

__all__ = ["PreTrainingLoss", "pre_training_loss"]


def _to_host(value: Any) -> np.ndarray:
    """A loss function's result as a host ndarray (one device-to-host transfer)."""
    return np.asarray(jax.device_get(value))


@overload
def pre_training_loss(
    params: Any,
    batches: Iterable[Any],
    loss_fn: LossFn,
    *,
    keys: tuple[str, str] | None = ...,
    reduction: BatchReduction = ...,
    with_sum: Literal[False] = ...,
) -> float: ...


@overload
def pre_training_loss(
    params: Any,
    batches: Iterable[Any],
    loss_fn: LossFn,
    *,
    keys: tuple[str, str] | None = ...,
    reduction: BatchReduction = ...,
    with_sum: Literal[True],
) -> PreTrainingLoss: ...


def pre_training_loss(
    params: Any,
    batches: Iterable[Any],
    loss_fn: LossFn,
    *,
    keys: tuple[str, str] | None = None,
    reduction: BatchReduction = "mean",
    with_sum: bool = False,
) -> float | PreTrainingLoss:
    """F_k: the mean of ``loss_fn(params, inputs, targets)`` over the samples of ``batches``, on JAX.

    Call it with the received weights set in ``params`` and before local
    training, on the training data; send the value as ``train_loss_before``
    (:func:`term_fl.plugin.train_metrics`). No gradient is taken and
    ``params`` is only passed to ``loss_fn``.

    Parameters
    ----------
    params : pytree or flax.nnx.Module
        The model's parameters as ``loss_fn`` takes them (a dict of arrays,
        Flax Linen variables, or an NNX module in eval mode).
    batches : iterable
        The training data: ``(inputs, targets)`` pairs, or mappings read with
        ``keys``. All of it at once is one batch: ``[(x_train, y_train)]``.
    loss_fn : callable
        ``loss_fn(params, inputs, targets)``: a scalar, taken as the batch
        mean (or its sum with ``reduction="sum"``), or one loss per sample
        (summed). The value returned is the mean over all samples, whatever
        the batch sizes.
    keys : (str, str), optional
        Input and target keys of mapping batches, e.g. ``("img", "label")``
        for Flower Datasets' CIFAR-10.
    reduction : {"mean", "sum"} (default: "mean")
        What a scalar result of ``loss_fn`` is.
    with_sum : bool (default: False)
        Also return the loss summed over the samples (``train_loss_before_sum``).

    Returns
    -------
    float or PreTrainingLoss
        The mean loss per sample (NaN or inf as ``loss_fn`` gives them);
        with ``with_sum``, ``PreTrainingLoss(mean, total, num_examples)``.

    Raises
    ------
    ValueError
        When ``batches`` holds no sample, a batch has an unexpected form, or
        ``loss_fn`` returns neither a scalar nor one loss per sample.
    """
    sums = evaluate_batches(params, batches, loss_fn, keys=keys, reduction=reduction, to_numpy=_to_host)
    return sums.result(with_sum)
