"""The pre-training loss F_k of a model that is NumPy arrays and a loss function.

For a ClientApp whose model is a list (or dict) of ndarrays, as in Flower's
NumPy template: the user's ``loss_fn(params, inputs, targets)`` is evaluated
on every batch of the client's training data with the received weights,
before local training, and averaged over the samples. JAX models have the
same helper in :mod:`.jax_loss`; PyTorch in :mod:`.losses`; scikit-learn
estimators in :mod:`.sklearn_loss`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, Literal, overload

import numpy as np
from numpy.typing import ArrayLike

from .batches import BatchReduction, LossSum, PreTrainingLoss, batch_total, split_batch

__all__ = ["PreTrainingLoss", "evaluate_batches", "pre_training_loss"]

LossFn = Callable[[Any, Any, Any], ArrayLike]
"""``loss_fn(params, inputs, targets)``: a scalar (the batch mean, or sum) or one loss per sample."""


def evaluate_batches(
    params: Any,
    batches: Iterable[Any],
    loss_fn: LossFn,
    *,
    keys: tuple[str, str] | None,
    reduction: BatchReduction,
    to_numpy: Callable[[Any], np.ndarray],
) -> LossSum:
    """The loss summed over every sample of ``batches`` (the loop the NumPy and JAX helpers share).

    ``to_numpy`` brings a loss function's result to the host as an ndarray.
    """
    sums = LossSum()
    for batch in batches:
        inputs, targets = split_batch(batch, keys)
        n = len(targets)
        if n == 0:
            continue
        sums.add(batch_total(to_numpy(loss_fn(params, inputs, targets)), n, reduction), n)
    return sums


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
    """F_k: the mean of ``loss_fn(params, inputs, targets)`` over the samples of ``batches``.

    Call it with the weights the server sent (``msg.content["arrays"].to_numpy_ndarrays()``)
    before local training, on the training data; send the value as
    ``train_loss_before`` (:func:`term_fl.plugin.train_metrics`). Nothing is
    trained or changed: ``params`` is only passed to ``loss_fn``.

    Parameters
    ----------
    params : any
        The model's weights as ``loss_fn`` takes them (a list or dict of ndarrays).
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
        The mean loss per sample (NaN or inf as ``loss_fn`` gives them: the
        strategies then leave the reply out of the round with a warning);
        with ``with_sum``, ``PreTrainingLoss(mean, total, num_examples)``.

    Raises
    ------
    ValueError
        When ``batches`` holds no sample, a batch has an unexpected form, or
        ``loss_fn`` returns neither a scalar nor one loss per sample.
    """
    sums = evaluate_batches(params, batches, loss_fn, keys=keys, reduction=reduction, to_numpy=np.asarray)
    return sums.result(with_sum)
