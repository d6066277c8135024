"""What a PyTorch ClientApp adds to work with TermFedAvg and QFFL: the pre-training loss.

TERM tilts, and q-FFL reweights, each client by F_k, the loss of the *received
global model* on the client's training data, measured *before* local training
(Li, Beirami, Sanjabi, Smith, JMLR 2023; Li et al., ICLR 2020). Flower's
example clients already send ``"train_loss"``, but as the mean loss *during*
local training, a different quantity; the strategies therefore read F_k from
the key :data:`TRAIN_LOSS_BEFORE` (``"train_loss_before"``) by default. A client
adds two lines to its ``@app.train()`` function::

    loss_before = pre_training_loss(model, trainloader, criterion)  # after loading the received weights
    ...                                                              # local training, as before
    metrics["train_loss_before"] = loss_before                       # in the reply's MetricRecord

plus ``from term_fl.plugin.losses import pre_training_loss``. A Flower Mod cannot do
this for the client: it sees Messages, not the client's model, data and loss.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import torch
from torch import Tensor, nn

from term_fl.common.keys import TRAIN_LOSS_BEFORE

__all__ = ["TRAIN_LOSS_BEFORE", "pre_training_loss"]


def _split(batch: Any, keys: tuple[str, str] | None) -> tuple[Any, Tensor]:
    if isinstance(batch, Mapping):
        if keys is None:
            raise ValueError(
                f"the batches are mappings with keys {sorted(batch)}: pass keys=(INPUT_KEY, TARGET_KEY), "
                "e.g. keys=('img', 'label')"
            )
        return batch[keys[0]], batch[keys[1]]
    if isinstance(batch, Sequence) and len(batch) == 2:
        return batch[0], batch[1]
    raise ValueError(
        f"a batch must be (inputs, targets) or a mapping read with keys=(INPUT_KEY, TARGET_KEY), "
        f"got {type(batch).__name__}"
    )


def _to(value: Any, device: torch.device) -> Any:
    return value.to(device) if isinstance(value, Tensor) else value


def pre_training_loss(
    model: nn.Module,
    batches: Iterable[Any],
    loss_fn: Callable[[Any, Tensor], Tensor],
    *,
    keys: tuple[str, str] | None = None,
    device: torch.device | str | None = None,
) -> float:
    """F_k: the mean loss of ``model`` over the samples of ``batches``, without training it.

    Call it after loading the received global weights into ``model`` and
    before local training, on the training data; send the value under
    :data:`TRAIN_LOSS_BEFORE` in the training reply's MetricRecord.

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
        Input and target keys of mapping batches (Flower Datasets gives e.g.
        ``("img", "label")``).
    device : torch.device or str, optional
        Where to run; default: the device of the model's first parameter (CPU
        for a model without parameters).

    Returns
    -------
    float
        The mean loss per sample (NaN or inf if the model produces them: the
        strategies then leave the reply out of the round with a warning).

    Raises
    ------
    ValueError
        When ``batches`` holds no sample, or a batch has an unexpected form.
    """
    if device is None:
        first = next(model.parameters(), None)
        device = first.device if first is not None else torch.device("cpu")
    device = torch.device(device)
    summed = getattr(loss_fn, "reduction", "mean") == "sum"
    total = 0.0
    count = 0
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            for batch in batches:
                inputs, targets = _split(batch, keys)
                targets = _to(targets, device)
                n = len(targets)
                if n == 0:
                    continue
                loss = loss_fn(model(_to(inputs, device)), targets)
                if loss.ndim > 0 or summed:
                    total += float(loss.sum())
                else:
                    total += float(loss) * n
                count += n
    finally:
        model.train(was_training)
    if count == 0:
        raise ValueError("pre_training_loss: the batches hold no sample; pass the client's training data")
    return total / count
