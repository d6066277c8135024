"""The pre-training loss F_k of a PyTorch model: what a PyTorch ClientApp adds for TermFedAvg, QFFL and AFL.

TERM tilts, and q-FFL and AFL reweight, each client by F_k, the loss of the
*received global model* on the client's training data, measured *before*
local training (Li, Beirami, Sanjabi, Smith, JMLR 2023; Li et al., ICLR
2020). Flower's example clients already send ``"train_loss"``, but as the
mean loss *during* local training, a different quantity; the strategies
therefore read F_k from the key :data:`TRAIN_LOSS_BEFORE`
(``"train_loss_before"``) by default. A client adds two lines to its
``@app.train()`` function::

    loss_before = pre_training_loss(model, trainloader, criterion)  # after loading the received weights
    ...                                                              # local training, as before
    metrics = {..., **train_metrics(loss_before)}                    # in the reply's MetricRecord

plus ``from term_fl.plugin import pre_training_loss, train_metrics``. A
Flower Mod cannot do this for the client: it sees Messages, not the client's
model, data and loss. The other frameworks' helpers: :mod:`.numpy_loss`,
:mod:`.jax_loss`, :mod:`.sklearn_loss`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, Literal, overload

import torch
from torch import Tensor, nn

from term_fl.common.keys import TRAIN_LOSS_BEFORE

from .batches import LossSum, PreTrainingLoss, batch_total, split_batch

__all__ = ["TRAIN_LOSS_BEFORE", "PreTrainingLoss", "pre_training_loss"]


def _to(value: Any, device: torch.device) -> Any:
    return value.to(device) if isinstance(value, Tensor) else value


@overload
def pre_training_loss(
    model: nn.Module,
    batches: Iterable[Any],
    loss_fn: Callable[[Any, Tensor], Tensor],
    *,
    keys: tuple[str, str] | None = ...,
    device: torch.device | str | None = ...,
    with_sum: Literal[False] = ...,
) -> float: ...


@overload
def pre_training_loss(
    model: nn.Module,
    batches: Iterable[Any],
    loss_fn: Callable[[Any, Tensor], Tensor],
    *,
    keys: tuple[str, str] | None = ...,
    device: torch.device | str | None = ...,
    with_sum: Literal[True],
) -> PreTrainingLoss: ...


def pre_training_loss(
    model: nn.Module,
    batches: Iterable[Any],
    loss_fn: Callable[[Any, Tensor], Tensor],
    *,
    keys: tuple[str, str] | None = None,
    device: torch.device | str | None = None,
    with_sum: bool = False,
) -> float | PreTrainingLoss:
    """F_k: the mean loss of ``model`` over the samples of ``batches``, without training it.

    Call it after loading the received global weights into ``model`` and
    before local training, on the training data; send the value under
    :data:`TRAIN_LOSS_BEFORE` in the training reply's MetricRecord
    (:func:`term_fl.plugin.train_metrics` spells the keys).

    The model runs in eval mode under ``torch.no_grad()`` (BatchNorm uses its
    running statistics and does not update them, dropout is off); its
    training mode is restored afterwards, its weights are untouched.

    Parameters
    ----------
    model : torch.nn.Module
        The model, holding the weights the server sent.
    batches : iterable
        The training data, e.g. a ``DataLoader``: ``(inputs, targets)`` pairs,
        or mappings read with ``keys``.
    loss_fn : callable
        ``loss_fn(outputs, targets) -> Tensor``, e.g. ``torch.nn.CrossEntropyLoss()``.
        A scalar result is taken as the batch *mean* (PyTorch's default
        reduction) unless ``loss_fn.reduction == "sum"``; a result with one value
        per sample (``reduction="none"``) is summed. Either way the value
        returned is the mean over all samples, whatever the batch sizes.
    keys : (str, str), optional
        Input and target keys of mapping batches: Flower Datasets' image
        datasets give ``keys=("img", "label")`` (CIFAR-10) or
        ``("image", "label")`` (MNIST).
    device : torch.device or str, optional
        Where to run; default: the device of the model's first parameter (CPU
        for a model without parameters).
    with_sum : bool (default: False)
        Also return the loss summed over the samples (what TERM and q-FFL
        read as ``train_loss_before_sum`` with ``loss_reduction="sum"``).

    Returns
    -------
    float or PreTrainingLoss
        The mean loss per sample (NaN or inf if the model produces them: the
        strategies then leave the reply out of the round with a warning);
        with ``with_sum``, ``PreTrainingLoss(mean, total, num_examples)``.

    Raises
    ------
    ValueError
        When ``batches`` holds no sample, or a batch has an unexpected form.
    """
    if device is None:
        first = next(model.parameters(), None)
        device = first.device if first is not None else torch.device("cpu")
    device = torch.device(device)
    reduction = "sum" if getattr(loss_fn, "reduction", "mean") == "sum" else "mean"
    sums = LossSum()
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            for batch in batches:
                inputs, targets = split_batch(batch, keys)
                n = len(targets)
                if n == 0:
                    continue
                loss = loss_fn(model(_to(inputs, device)), _to(targets, device))
                sums.add(batch_total(loss.detach().to("cpu", torch.float64).numpy(), n, reduction), n)
    finally:
        model.train(was_training)
    return sums.result(with_sum)
