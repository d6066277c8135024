"""The metrics a training reply carries for term-fl's strategies, with the keys spelled once.

Merged into the reply's metrics as they are::

    metrics = {"num-examples": len(trainset), "train_loss": train_loss, **train_metrics(loss_before)}

The keys come from :mod:`term_fl.common.keys`, the one home of the
contract between clients and strategies (docs/contracts.md, 'Messages').
"""

from __future__ import annotations

import numbers

from term_fl.common.keys import NUM_EXAMPLES, PARTITION_ID, TRAIN_LOSS_BEFORE, TRAIN_LOSS_BEFORE_SUM

from .batches import PreTrainingLoss

__all__ = ["train_metrics"]


def _whole(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or int(value) < 0:
        raise ValueError(f"train_metrics: {name} must be a non-negative int, got {value!r}")
    return int(value)


def train_metrics(
    loss_before: float | PreTrainingLoss,
    *,
    num_examples: int | None = None,
    partition_id: int | None = None,
) -> dict[str, int | float]:
    """The metrics of a training reply that term-fl's strategies read.

    Parameters
    ----------
    loss_before : float or PreTrainingLoss
        F_k from a ``pre_training_loss`` helper: a float gives
        ``train_loss_before``; a :class:`~.batches.PreTrainingLoss` (``with_sum=True``)
        gives ``train_loss_before`` and ``train_loss_before_sum`` (read by
        TERM and q-FFL with ``loss_reduction="sum"``). NaN and inf are sent
        as they are: the strategies leave such a reply out with a warning.
    num_examples : int, optional
        The client's training samples, as ``num-examples`` (the weight n_k
        every reply must carry; leave it out when the reply already has it).
    partition_id : int, optional
        The client's ``partition-id`` (``context.node_config["partition-id"]``):
        replies that carry it are summed and logged in partition order.

    Returns
    -------
    dict
        Metric key -> value, for the reply's ``MetricRecord``.

    Raises
    ------
    ValueError
        When the loss is not a number, or ``num_examples`` / ``partition_id``
        is not a non-negative int.
    """
    if isinstance(loss_before, PreTrainingLoss):
        metrics: dict[str, int | float] = {TRAIN_LOSS_BEFORE: float(loss_before.mean),
                                           TRAIN_LOSS_BEFORE_SUM: float(loss_before.total)}
    elif isinstance(loss_before, numbers.Real) and not isinstance(loss_before, bool):
        metrics = {TRAIN_LOSS_BEFORE: float(loss_before)}
    else:
        raise ValueError(
            f"train_metrics: loss_before must be the float (or PreTrainingLoss) a pre_training_loss helper "
            f"returns, got {type(loss_before).__name__}"
        )
    if num_examples is not None:
        metrics[NUM_EXAMPLES] = _whole("num_examples", num_examples)
    if partition_id is not None:
        metrics[PARTITION_ID] = _whole("partition_id", partition_id)
    return metrics

