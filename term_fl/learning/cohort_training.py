"""Train and evaluate a cohort of devices at once: :mod:`term_fl.learning.training`, batched over devices.

A round trains every sampled device from the same global model, each with
its own data, seed and number of steps. Run one device after another, a step
of a linear model does microseconds of arithmetic and tens of microseconds
of Python and dispatch. Here the devices' parameters are stacked into
tensors with a leading device axis, and one step advances every device by
one of its own SGD steps: batched matrix products (``bmm``) over the
devices, the gradients written out per built-in model (``_KERNELS``;
``tests/test_cohort.py`` checks them against autograd). The arithmetic is
that of :func:`term_fl.learning.training.train_tensors`, device by device:

- the same batches, drawn with each device's seed and laid out step by
  step, ragged devices padded with a mask (:mod:`.cohort_batches`);
- the same objective per batch: the sample-level tilted loss
  ``tilted_mean(l, tau)`` (the mean at ``tau = 0``) plus the model's
  ``penalty()``, and the same SGD step with weight decay
  (``g += weight_decay * p; p -= lr * g``);
- the same report: the incoming model's loss on the device's training data
  (mean, sum, tau-tilted) and accuracy, and the trained model's mean loss,
  from the model's own ``per_sample_loss`` and ``predict`` and
  :func:`term_fl.learning.training.segment_results`.

Scores are laid out ``(devices, classes, rows)``: ``F.cross_entropy`` and
``argmax(dim=1)`` then take them as they are, and softmax over a non-last
dimension is several times faster on the CPU than over a last dimension of
10 classes. Results agree with the sequential path to float32 rounding (the
batched products sum in another order), not bit for bit.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from term_fl.learning.cohort_batches import CohortSchedule, StepTargets, cohort_schedule, step_targets
from term_fl.learning.models import MLP, LinearSVM, LogisticRegression, TermModel
from term_fl.learning.training import (
    EvalResult,
    TrainResult,
    check_segment_ends,
    check_train_args,
    negligible_tilt,
    segment_results,
)

# Candidate rows per device and block of the loss pass, and the cost of one block in rows: the
# width that wastes least (padding of small devices vs one more block of dispatch) is used.
LOSS_ROWS = (32, 64, 128, 256, 512)
BLOCK_COST_ROWS = 2048
# Rows per block when one model is evaluated on many devices' rows (memory only).
EVAL_ROWS = 65536

StepObserver = Callable[[int, Sequence[int], dict[str, Tensor]], None]


# --------------------------------------------------------------------------
# Batched forward and backward of the built-in models, scores (k, C, B)
# --------------------------------------------------------------------------


class _LinearLayers:
    """``scores = W x + b`` per device: the ``linear`` layer of ``LinearSVM`` and ``LogisticRegression``."""

    names = ("linear.weight", "linear.bias")
    penalised = ("linear.weight",)

    @staticmethod
    def forward(p: Sequence[Tensor], x: Tensor) -> tuple[Tensor, tuple]:
        weight, bias = p
        return torch.baddbmm(bias.unsqueeze(2), weight, x.transpose(1, 2)), (x,)

    @staticmethod
    def backward(p: Sequence[Tensor], cache: tuple, g: Tensor) -> list[Tensor]:
        (x,) = cache
        return [torch.bmm(g, x), g.sum(2)]


class _MLPLayers:
    """``scores = W2 relu(W1 x + b1) + b2`` per device (:class:`term_fl.learning.models.MLP`)."""

    names = ("hidden.weight", "hidden.bias", "output.weight", "output.bias")
    penalised = ("hidden.weight", "output.weight")

    @staticmethod
    def forward(p: Sequence[Tensor], x: Tensor) -> tuple[Tensor, tuple]:
        w1, b1, w2, b2 = p
        hidden = torch.baddbmm(b1.unsqueeze(2), w1, x.transpose(1, 2)).relu_()
        return torch.baddbmm(b2.unsqueeze(2), w2, hidden), (x, hidden)

    @staticmethod
    def backward(p: Sequence[Tensor], cache: tuple, g: Tensor) -> list[Tensor]:
        x, hidden = cache
        # relu's backward as autograd computes it (no gradient where the output is 0); several
        # times faster than a boolean mask on the CPU
        g_hidden = torch.ops.aten.threshold_backward(torch.bmm(p[2].transpose(1, 2), g), hidden, 0)
        return [torch.bmm(g_hidden, x), g_hidden.sum(2), torch.bmm(g, hidden.transpose(1, 2)), g.sum(2)]


def _hinge_grad(scores: Tensor, y_pm: Tensor, coef: Tensor) -> Tensor:
    """d/ds of ``sum_i weight_i max(0, 1 - y_i s_i)`` (scores ``(k, 1, B)``, labels -1/+1), ``coef = -weight y``.

    ``coef_i`` where ``1 - y_i s_i >= 0`` (torch's ``clamp(min=0)`` passes
    the gradient at 0); in float32 that is ``y_i s_i <= 1`` exactly, as
    ``y s`` is exact and ``1 - y s`` is exact near 1.
    """
    return torch.where(y_pm * scores.squeeze(1) <= 1.0, coef, 0.0).unsqueeze(1)


def _cross_entropy_grad(scores: Tensor, y: Tensor, weight: Tensor) -> Tensor:
    """d/ds of ``sum_i weight_i CE(s_i, y_i)`` (scores ``(k, C, B)``): ``weight (softmax(s) - onehot(y))``."""
    g = torch.softmax(scores, dim=1)
    g.scatter_add_(1, y.unsqueeze(1), torch.full_like(g[:, :1], -1.0))
    return g.mul_(weight.unsqueeze(1))


@dataclass(frozen=True)
class _Kernel:
    layers: type[_LinearLayers] | type[_MLPLayers]
    binary: bool  # the linear SVM: one score per sample, hinge loss on -1/+1 labels


_KERNELS: dict[type[TermModel], _Kernel] = {
    LinearSVM: _Kernel(_LinearLayers, binary=True),
    LogisticRegression: _Kernel(_LinearLayers, binary=False),
    MLP: _Kernel(_MLPLayers, binary=False),
}


def supports(model: TermModel) -> bool:
    """Whether the cohort functions handle ``model``: the built-in models (exactly their classes)."""
    return type(model) in _KERNELS


def _kernel(model: TermModel) -> _Kernel:
    kernel = _KERNELS.get(type(model))
    if kernel is None:
        names = ", ".join(c.__name__ for c in _KERNELS)
        raise TypeError(f"the cohort functions support {names}; got {type(model).__name__}.")
    return kernel


def _losses(model: TermModel, kernel: _Kernel, scores: Tensor, y: Tensor) -> Tensor:
    """The model's own ``per_sample_loss`` on scores ``(k, C, B)`` -> ``(k, B)``."""
    return model.per_sample_loss(scores.squeeze(1) if kernel.binary else scores, y)


def _losses_and_hits(model: TermModel, kernel: _Kernel, scores: Tensor, y: Tensor) -> tuple[Tensor, Tensor]:
    """:func:`_losses` and the model's own ``predict == y``, ``(k, B)`` each."""
    if kernel.binary:
        scores = scores.squeeze(1)
    return model.per_sample_loss(scores, y), model.predict(scores) == y


def _tilt_weights(losses: Tensor, mask: Tensor, count: Tensor, tau: float) -> Tensor:
    """Gradient of ``tilted_mean(l, tau)`` in each ``l_i`` over the real entries of each row.

    ``softmax(tau l)_i``, in the form autograd computes for
    :func:`term_fl.learning.training.tilted_mean`:
    ``(expm1(tau (l_i - c)) + 1) / (n + sum_j expm1(tau (l_j - c)))`` with
    ``c`` the row's largest ``tau l``; 0 on padded entries.
    """
    fill = float("-inf") if tau > 0 else float("inf")
    valid = losses.masked_fill(~mask, fill)
    shift = valid.amax(1, keepdim=True) if tau > 0 else valid.amin(1, keepdim=True)
    e = torch.where(mask, torch.expm1(tau * (losses - shift)), 0.0)
    return torch.where(mask, e + 1.0, 0.0) / (count.unsqueeze(1) + e.sum(1, keepdim=True))


# --------------------------------------------------------------------------
# Training and evaluation
# --------------------------------------------------------------------------


def train_cohort(
    model: TermModel,
    x: Tensor,
    y: Tensor,
    starts: Sequence[int],
    sizes: Sequence[int],
    *,
    lr: float,
    epochs: int,
    batch_size: int,
    weight_decay: float = 0.0,
    tau: float = 0.0,
    seeds: Sequence[int],
    on_step: StepObserver | None = None,
) -> list[TrainResult]:
    """:func:`term_fl.learning.training.train_tensors` for many devices at once, from the weights ``model`` holds.

    Parameters
    ----------
    model : TermModel
        A built-in model (:func:`supports`) holding the incoming global
        weights, on the device of ``x``. It is not changed.
    x, y : Tensor
        Rows of every device, as :func:`term_fl.learning.training.as_tensors` returns
        them; device i owns rows ``starts[i] : starts[i] + sizes[i]``.
    starts, sizes : sequence of int
        Each device's first row and number of training examples (>= 1).
    lr, epochs, batch_size, weight_decay, tau
        As for :func:`term_fl.learning.training.train`, the same for every device.
    seeds : sequence of int
        Each device's seed: its batches are those ``train_tensors`` draws with it.
    on_step : callable, optional
        Called after every step with the step index, the input positions of
        the devices that took it and their parameters (views with a leading
        device axis in that order, by ``state_dict`` name): for tests.

    Returns
    -------
    list of TrainResult
        One per device in input order, as ``train_tensors`` returns it.
    """
    # Check the arguments as train_tensors does, and that every device's rows lie in x
    kernel = _kernel(model)
    lr, epochs, batch_size, weight_decay, tau = check_train_args(lr, epochs, batch_size, weight_decay, tau)
    starts_np, sizes_np = _check_layout(x, starts, sizes, seeds)

    # Every device's batches, step by step, and what each step's objective needs
    plan = cohort_schedule(starts_np, sizes_np, epochs=epochs, batch_size=batch_size, seeds=seeds, device=x.device)
    targets = step_targets(y, plan, kernel.binary)

    # One copy of the incoming weights per device, stacked on a leading device axis
    state = dict(model.named_parameters())
    params = [
        state[name].detach().unsqueeze(0).repeat(len(sizes_np), *([1] * state[name].ndim))
        for name in kernel.layers.names
    ]

    # Train: every step advances the devices that still have steps, in place
    _take_steps(model, kernel, params, plan, targets, x, lr=lr, weight_decay=weight_decay, tau=tau,
                batch_size=batch_size, on_step=on_step)

    # Report: each trained model's mean loss on its rows, and the incoming model on every device's rows
    # (one model: one pass, large products)
    with torch.no_grad():
        loss_after = _mean_losses(model, kernel, params, x, y, starts_np[plan.order], sizes_np[plan.order])
    own = torch.from_numpy(np.concatenate([np.arange(s, s + n) for s, n in zip(starts_np, sizes_np)])).to(x.device)
    before = evaluate_cohort(model, x.index_select(0, own), y.index_select(0, own), np.cumsum(sizes_np).tolist(), tau)
    return _results(kernel, plan, params, before, loss_after, sizes_np)


def _check_layout(
    x: Tensor, starts: Sequence[int], sizes: Sequence[int], seeds: Sequence[int]
) -> tuple[np.ndarray, np.ndarray]:
    """``starts`` and ``sizes`` as int64 arrays; ValueError unless each device has >= 1 row inside ``x``."""
    starts_np = np.asarray(starts, dtype=np.int64).reshape(-1)
    sizes_np = np.asarray(sizes, dtype=np.int64).reshape(-1)
    if not len(starts_np) == len(sizes_np) == len(seeds) or len(sizes_np) == 0:
        raise ValueError(
            f"starts, sizes and seeds need one entry per device, at least one device "
            f"(got {len(starts_np)}, {len(sizes_np)}, {len(seeds)})."
        )
    if sizes_np.min() < 1 or starts_np.min() < 0 or int((starts_np + sizes_np).max()) > x.shape[0]:
        raise ValueError(f"every device needs >= 1 example inside the {x.shape[0]} rows of x.")
    return starts_np, sizes_np


@torch.no_grad()
def _take_steps(
    model: TermModel,
    kernel: _Kernel,
    params: list[Tensor],
    plan: CohortSchedule,
    targets: StepTargets,
    x: Tensor,
    *,
    lr: float,
    weight_decay: float,
    tau: float,
    batch_size: int,
    on_step: StepObserver | None,
) -> None:
    """Run every step of the schedule on the stacked ``params`` (sorted devices), in place.

    One step is one SGD step of each of the first ``plan.active[step]``
    devices: the batch objective's gradient written out (forward, the
    gradient in the scores, backward), the model's L2 penalty, weight decay
    and ``p -= lr * g``, in the order of ``torch.optim.SGD``.
    """
    layers = kernel.layers
    penalised = [layers.names.index(name) for name in layers.penalised] if model.l2 != 0.0 else []
    tilt = not negligible_tilt(tau, torch.float32)
    for step, k in enumerate(plan.active):
        # The batch of each of the k devices that take this step, and their parameters (views)
        xb = x.index_select(0, plan.rows[step, :k].reshape(-1)).view(k, batch_size, -1)
        p = [t[:k] for t in params]
        # Forward, and the gradient of the batch objective in the scores
        scores, cache = layers.forward(p, xb)
        g_scores = _score_gradient(model, kernel, scores, plan, targets, step, k, tau if tilt else None)
        # Backward to the parameters, plus the gradient of the model's own penalty
        grads = layers.backward(p, cache, g_scores)
        for i in penalised:
            grads[i].add_(p[i], alpha=model.l2)
        # The SGD step with weight decay
        for param, grad in zip(p, grads):
            if weight_decay != 0.0:
                grad = grad.add(param, alpha=weight_decay)
            param.add_(grad, alpha=-lr)
        if on_step is not None:
            on_step(step, plan.order[:k].tolist(), dict(zip(layers.names, p)))


def _score_gradient(
    model: TermModel,
    kernel: _Kernel,
    scores: Tensor,
    plan: CohortSchedule,
    targets: StepTargets,
    step: int,
    k: int,
    tau: float | None,
) -> Tensor:
    """d(batch objective)/d(scores) of the first ``k`` devices at ``step``: the mean loss, or tilted by ``tau``.

    The objective is ``sum_i w_i l_i`` with ``w_i = 1/n`` (the mean) or, with
    a ``tau`` (None: no tilt), the tilted weights of the batch's losses
    (:func:`_tilt_weights`); padded rows have weight 0.
    """
    labels = targets.labels[step, :k]
    if tau is not None:
        losses = _losses(model, kernel, scores, labels)
        weight = _tilt_weights(losses, plan.mask[step, :k], plan.count[step, :k], tau)
    else:
        weight = targets.mean_weight[step, :k]
    if kernel.binary:
        signs = targets.signs[step, :k]
        coef = -(signs * weight) if tau is not None else targets.hinge_coef[step, :k]
        return _hinge_grad(scores, signs, coef)
    return _cross_entropy_grad(scores, labels, weight)


def _results(
    kernel: _Kernel,
    plan: CohortSchedule,
    params: list[Tensor],
    before: Sequence[EvalResult],
    loss_after: np.ndarray,
    sizes: np.ndarray,
) -> list[TrainResult]:
    """One :class:`TrainResult` per device in input order (``params`` and ``loss_after`` are in sorted order)."""
    host = [t.cpu().numpy() for t in params]
    results: list[TrainResult | None] = [None] * len(sizes)
    for j, i in enumerate(plan.order):
        results[i] = TrainResult(
            weights={name: values[j] for name, values in zip(kernel.layers.names, host)},
            before=before[i],
            loss_after=float(loss_after[j]),
            num_examples=int(sizes[i]),
            steps=int(plan.steps[i]),
        )
    return results  # type: ignore[return-value]


def _mean_losses(
    model: TermModel, kernel: _Kernel, params: list[Tensor], x: Tensor, y: Tensor, starts: np.ndarray, sizes: np.ndarray
) -> np.ndarray:
    """Each device's mean data loss under its own parameters, on its rows (devices sorted by size, largest first).

    Blocks of rows per device (a width from :data:`LOSS_ROWS`), the devices
    that still have rows forming a prefix; per-sample losses summed in float64.
    """
    device = x.device
    total = torch.zeros(len(sizes), dtype=torch.float64, device=device)
    starts_t = torch.from_numpy(starts).to(device)
    sizes_t = torch.from_numpy(sizes).to(device)
    # The block width that costs least: padded rows of the small devices vs blocks of the largest
    block = min(LOSS_ROWS, key=lambda w: int(np.ceil(sizes / w).sum()) * w + BLOCK_COST_ROWS * -(-int(sizes[0]) // w))
    for first in range(0, int(sizes[0]), block):
        # Rows first..first+width of the k devices that have them (rows past a device's end masked)
        k = int(np.count_nonzero(sizes > first))
        width = min(block, int(sizes[0]) - first)
        offset = torch.arange(first, first + width, device=device)
        mask = offset.unsqueeze(0) < sizes_t[:k].unsqueeze(1)
        rows = torch.where(mask, starts_t[:k].unsqueeze(1) + offset, 0).reshape(-1)
        # Each device's model on its own rows; the real rows' losses summed in float64
        scores, _ = kernel.layers.forward([p[:k] for p in params], x.index_select(0, rows).view(k, width, -1))
        loss = _losses(model, kernel, scores, y.index_select(0, rows).view(k, width))
        total[:k] += torch.where(mask, loss.double(), 0.0).sum(1)
    return total.cpu().numpy() / sizes


def evaluate_cohort(model: TermModel, x: Tensor, y: Tensor, ends: Sequence[int], tau: float = 0.0) -> list[EvalResult]:
    """:func:`term_fl.learning.training.evaluate_segments` for a built-in model, in the cohort's layout.

    One model (the weights ``model`` holds) on consecutive segments of
    ``(x, y)`` (every device's validation and test split, say), in blocks of
    :data:`EVAL_ROWS` rows: the same per-sample losses and predictions, and
    the same :func:`term_fl.learning.training.segment_results`.
    """
    kernel = _kernel(model)
    check_segment_ends(ends, x.shape[0])
    state = dict(model.named_parameters())
    params = [state[name].detach().unsqueeze(0) for name in kernel.layers.names]
    losses, hits = [], []
    with torch.no_grad():
        for first in range(0, x.shape[0], EVAL_ROWS):
            scores, _ = kernel.layers.forward(params, x[first : first + EVAL_ROWS].unsqueeze(0))
            loss, hit = _losses_and_hits(model, kernel, scores, y[first : first + EVAL_ROWS].unsqueeze(0))
            losses.append(loss[0])
            hits.append(hit[0])
    return segment_results(torch.cat(losses), torch.cat(hits), ends, tau)
