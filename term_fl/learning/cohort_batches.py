"""The batches of a cohort: each device's permutations, laid out step by step.

:func:`term_fl.learning.cohort_training.train_cohort` trains many devices
at once, and each must take the batches that
:func:`term_fl.learning.training.train_tensors` takes with the device's
seed: its permutations come from its own ``torch.Generator(seed)``, one
``randperm`` per epoch unless the device has at most ``batch_size``
examples (then one full batch in order, no draw), cut into batches of
``batch_size`` with a smaller last batch.

Ragged devices: batches are padded to ``batch_size`` with a mask (a padded
row has weight 0), and devices are sorted by size so that the devices that
still have steps to take are a prefix of the stack: a step computes only on
that prefix (a view), so a device of 4 examples costs nothing while one of
500 finishes its epochs.

The step indices are drawn on the host once per cohort and copied to the
model's device in one transfer; the training loop then runs on that device
without synchronising with the host.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

__all__ = ["CohortSchedule", "StepTargets", "cohort_schedule", "device_rows", "step_targets"]


@dataclass(frozen=True)
class CohortSchedule:
    """Rows of every step, devices sorted by size (largest first).

    ``rows[s, j]`` are the rows of sorted device j's batch at step s (padding
    points at row 0), ``mask`` marks the real ones and ``count`` counts them;
    the first ``active[s]`` devices take step s.
    """

    order: np.ndarray  # sorted position -> input position
    rows: Tensor  # (S, K, B) int64
    mask: Tensor  # (S, K, B) bool
    count: Tensor  # (S, K) float32
    active: list[int]
    steps: np.ndarray  # (K,) steps per device, input order


def device_rows(
    starts: np.ndarray, sizes: np.ndarray, *, epochs: int, batch_size: int, seeds: Sequence[int]
) -> tuple[np.ndarray, np.ndarray]:
    """Each device's rows, batch after batch, as :func:`term_fl.learning.training.train_tensors` draws them.

    A device of n rows takes ``ceil(n / batch_size)`` steps per epoch (one
    when ``n <= batch_size``); its permutations are drawn with its own
    ``torch.Generator(seed)``. Returns ``rows`` ``(K, max steps * batch_size)``,
    device k's step s being ``rows[k, s * batch_size : (s + 1) * batch_size]``
    (-1 pads a short batch at its end, and the steps past the device's
    own), and the steps per device ``(K,)``.
    """
    per_epoch = np.where(sizes <= batch_size, 1, -(-sizes // batch_size))
    steps = per_epoch * epochs
    rows = np.full((len(sizes), int(steps.max()) * batch_size), -1, dtype=np.int64)
    generator = torch.Generator()  # reseeded per device: manual_seed resets its whole state
    for k in range(len(sizes)):
        n, start = int(sizes[k]), int(starts[k])
        stride = int(per_epoch[k]) * batch_size
        if n <= batch_size:  # one full batch per epoch, in order, no draw (as train_tensors)
            for epoch in range(epochs):
                rows[k, epoch * stride : epoch * stride + n] = np.arange(start, start + n)
            continue
        generator.manual_seed(int(seeds[k]))
        for epoch in range(epochs):
            rows[k, epoch * stride : epoch * stride + n] = torch.randperm(n, generator=generator).numpy() + start
    return rows, steps


def cohort_schedule(
    starts: np.ndarray, sizes: np.ndarray, *, epochs: int, batch_size: int, seeds: Sequence[int], device: torch.device
) -> CohortSchedule:
    """Every device's batches (:func:`device_rows`) laid out step by step, devices sorted by size.

    The row indices are drawn on the host and copied to ``device`` in one transfer.
    """
    # Devices sorted by size, largest first: those with steps left are a prefix of the stack
    order = np.argsort(-sizes, kind="stable")
    by_device, sorted_steps = device_rows(
        starts[order], sizes[order], epochs=epochs, batch_size=batch_size, seeds=[seeds[i] for i in order]
    )
    # Steps first: (S, K, B), the padding masked and pointed at row 0
    rows = np.ascontiguousarray(by_device.reshape(len(sizes), -1, batch_size).transpose(1, 0, 2))
    mask = rows >= 0
    rows[~mask] = 0
    steps = np.empty_like(sorted_steps)
    steps[order] = sorted_steps
    return CohortSchedule(
        order=order,
        rows=torch.from_numpy(rows).to(device),
        mask=torch.from_numpy(mask).to(device),
        count=torch.from_numpy(mask.sum(axis=2).astype(np.float32)).to(device),
        active=[int(np.count_nonzero(sorted_steps > s)) for s in range(rows.shape[0])],
        steps=steps,
    )


@dataclass(frozen=True)
class StepTargets:
    """Every step's labels and the untilted objective's weight on each row, gathered once per cohort.

    ``mean_weight`` is 1/n on the n real rows of a batch (the mean loss's
    gradient), 0 on padding; the linear SVM also keeps its labels as -1/+1
    (``signs``) and ``hinge_coef = -(signs * mean_weight)``.
    """

    labels: Tensor  # (S, K, B) int64
    mean_weight: Tensor  # (S, K, B) float32
    signs: Tensor | None  # (S, K, B) float32, the SVM only
    hinge_coef: Tensor | None  # (S, K, B) float32, the SVM only


def step_targets(y: Tensor, plan: CohortSchedule, binary: bool) -> StepTargets:
    """The :class:`StepTargets` of a schedule: every step's labels in one gather."""
    labels = y.index_select(0, plan.rows.reshape(-1)).view(plan.rows.shape)
    mean_weight = plan.mask / plan.count.clamp(min=1.0).unsqueeze(2)
    if not binary:
        return StepTargets(labels, mean_weight, None, None)
    signs = 2.0 * labels.to(torch.float32) - 1.0  # labels as -1/+1, as LinearSVM.per_sample_loss
    return StepTargets(labels, mean_weight, signs, -(signs * mean_weight))
