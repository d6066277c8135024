"""What every framework's pre-training loss shares: reading a batch, summing a loss over samples.

Each helper (:mod:`.losses` for PyTorch, :mod:`.numpy_loss`, :mod:`.jax_loss`,
:mod:`.sklearn_loss`) evaluates the user's loss batch by batch and hands the
results here as numbers: F_k is the loss summed over the client's samples,
divided by their count, whatever the batch sizes and whatever reduction the
user's loss function applies. Framework-free (numpy only).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal, NamedTuple

import numpy as np
from numpy.typing import ArrayLike

__all__ = ["BatchReduction", "LossSum", "PreTrainingLoss", "batch_total", "split_batch"]

BatchReduction = Literal["mean", "sum"]
"""What a scalar result of a user's loss function is: the batch's mean (the usual default) or its sum."""

KEYS_EXAMPLE = "keys=('img', 'label')"  # Flower Datasets' image datasets (CIFAR-10, MNIST ...)


class PreTrainingLoss(NamedTuple):
    """F_k with its sum, what a helper returns when asked ``with_sum=True``.

    :func:`term_fl.plugin.train_metrics` turns it into both metrics: ``mean``
    as ``train_loss_before`` (what the strategies read by default) and
    ``total`` as ``train_loss_before_sum`` (what TERM and q-FFL read with
    ``loss_reduction="sum"``).
    """

    mean: float  # the loss per sample: F_k
    total: float  # the loss summed over the samples
    num_examples: int  # the samples it was measured on


def split_batch(batch: Any, keys: tuple[str, str] | None) -> tuple[Any, Any]:
    """(inputs, targets) of one batch: a pair, or a mapping read with ``keys=(INPUT_KEY, TARGET_KEY)``.

    Raises
    ------
    ValueError
        For a mapping without ``keys``, a key the mapping lacks, or a batch
        that is neither a pair nor a mapping; the message names what was found.
    """
    if isinstance(batch, Mapping):
        if keys is None:
            raise ValueError(
                f"the batches are mappings with keys {sorted(batch)}: pass keys=(INPUT_KEY, TARGET_KEY), "
                f"e.g. {KEYS_EXAMPLE} for Flower Datasets' image datasets"
            )
        if len(keys) != 2:
            raise ValueError(f"keys must be (INPUT_KEY, TARGET_KEY), got {keys!r}")
        missing = [key for key in keys if key not in batch]
        if missing:
            raise ValueError(f"keys={tuple(keys)!r}: the batches have no key {missing[0]!r}; their keys: {sorted(batch)}")
        return batch[keys[0]], batch[keys[1]]
    if isinstance(batch, Sequence) and not isinstance(batch, str) and len(batch) == 2:
        return batch[0], batch[1]
    raise ValueError(
        "a batch must be (inputs, targets) or a mapping read with keys=(INPUT_KEY, TARGET_KEY), "
        f"got {type(batch).__name__}"
    )


def batch_total(value: ArrayLike, count: int, reduction: BatchReduction = "mean") -> float:
    """The loss of one batch of ``count`` samples summed over them, from what a loss function returned.

    Parameters
    ----------
    value : array-like
        The loss function's result: a scalar (the batch mean, or its sum when
        ``reduction="sum"``), or one loss per sample (an array whose first
        axis has ``count`` entries; every entry is summed).
    count : int
        The batch's samples.
    reduction : {"mean", "sum"} (default: "mean")
        What a scalar ``value`` is.

    Raises
    ------
    ValueError
        For a non-scalar result whose first axis is not the batch's samples,
        or an unknown ``reduction``.
    """
    if reduction not in ("mean", "sum"):
        raise ValueError(f"reduction must be 'mean' or 'sum' (what a scalar loss is), got {reduction!r}")
    values = np.asarray(value, dtype=np.float64)
    if values.ndim == 0:
        return float(values) if reduction == "sum" else float(values) * count
    if values.shape[0] != count:
        raise ValueError(
            f"the loss function returned shape {values.shape} for a batch of {count} samples: return a scalar "
            "(the batch mean, or its sum with reduction='sum') or one loss per sample"
        )
    return float(np.sum(values))


class LossSum:
    """The running sum of a loss over batches, and the F_k it gives."""

    def __init__(self) -> None:
        self.total = 0.0
        self.count = 0

    def add(self, total: float, count: int) -> None:
        """Add a batch: its summed loss and its number of samples."""
        self.total += total
        self.count += count

    def result(self, with_sum: bool) -> float | PreTrainingLoss:
        """F_k (the mean per sample), or :class:`PreTrainingLoss` when ``with_sum``.

        Raises
        ------
        ValueError
            When no sample was added.
        """
        if self.count == 0:
            raise ValueError("pre_training_loss: the data hold no sample; pass the client's training data")
        mean = self.total / self.count
        return PreTrainingLoss(mean, self.total, self.count) if with_sum else mean
