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

- the same batches: each device's permutations come from its own
  ``torch.Generator(seed)``, one ``randperm`` per epoch unless the device has
  at most ``batch_size`` examples (then one full batch in order, no draw),
  cut into batches of ``batch_size`` with a smaller last batch;
- the same objective per batch: the sample-level tilted loss
  ``tilted_mean(l, tau)`` (the mean at ``tau = 0``) plus the model's
  ``penalty()``, and the same SGD step with weight decay
  (``g += weight_decay * p; p -= lr * g``);
- the same report: the incoming model's loss on the device's training data
  (mean, sum, tau-tilted) and accuracy, and the trained model's mean loss,
  from the model's own ``per_sample_loss`` and ``predict`` and
  :func:`term_fl.learning.training.segment_results`.

Ragged devices: batches are padded to ``batch_size`` with a mask (a padded
row has weight 0), and devices are sorted by size so that the devices that
still have steps to take are a prefix of the stack: a step computes only on
that prefix (a view), so a device of 4 examples costs nothing while one of
500 finishes its epochs. Scores are laid out ``(devices, classes, rows)``:
``F.cross_entropy`` and ``argmax(dim=1)`` then take them as they are, and
softmax over a non-last dimension is several times faster on the CPU than
over a last dimension of 10 classes. Results agree with the sequential path
to float32 rounding (the batched products sum in another order), not bit
for bit.

The step indices are drawn on the host once per cohort and copied to the
model's device in one transfer; the loop then runs on that device without
synchronising with the host.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

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
# The batches: each device's permutations, laid out step by step
# --------------------------------------------------------------------------


@dataclass(frozen=True)
class _Schedule:
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


def _schedule(
    starts: np.ndarray, sizes: np.ndarray, *, epochs: int, batch_size: int, seeds: Sequence[int], device: torch.device
) -> _Schedule:
    order = np.argsort(-sizes, kind="stable")
    per_epoch = np.where(sizes <= batch_size, 1, -(-sizes // batch_size))
    steps = per_epoch * epochs
    total = int(steps.max())
    by_device = np.full((len(sizes), total * batch_size), -1, dtype=np.int64)
    for j, i in enumerate(order):
        n, start = int(sizes[i]), int(starts[i])
        stride = int(per_epoch[i]) * batch_size
        if n <= batch_size:  # one full batch per epoch, in order, no draw (as train_tensors)
            for epoch in range(epochs):
                by_device[j, epoch * stride : epoch * stride + n] = np.arange(start, start + n)
            continue
        generator = torch.Generator().manual_seed(int(seeds[i]))
        for epoch in range(epochs):
            by_device[j, epoch * stride : epoch * stride + n] = torch.randperm(n, generator=generator).numpy() + start
    rows = np.ascontiguousarray(by_device.reshape(len(sizes), total, batch_size).transpose(1, 0, 2))
    mask = rows >= 0
    rows[~mask] = 0
    sorted_steps = steps[order]
    return _Schedule(
        order=order,
        rows=torch.from_numpy(rows).to(device),
        mask=torch.from_numpy(mask).to(device),
        count=torch.from_numpy(mask.sum(axis=2).astype(np.float32)).to(device),
        active=[int(np.count_nonzero(sorted_steps > s)) for s in range(total)],
        steps=steps,
    )


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
    kernel = _kernel(model)
    lr, epochs, batch_size, weight_decay, tau = check_train_args(lr, epochs, batch_size, weight_decay, tau)
    starts_np = np.asarray(starts, dtype=np.int64).reshape(-1)
    sizes_np = np.asarray(sizes, dtype=np.int64).reshape(-1)
    if not len(starts_np) == len(sizes_np) == len(seeds) or len(sizes_np) == 0:
        raise ValueError(
            f"starts, sizes and seeds need one entry per device, at least one device "
            f"(got {len(starts_np)}, {len(sizes_np)}, {len(seeds)})."
        )
    if sizes_np.min() < 1 or starts_np.min() < 0 or int((starts_np + sizes_np).max()) > x.shape[0]:
        raise ValueError(f"every device needs >= 1 example inside the {x.shape[0]} rows of x.")

    layers = kernel.layers
    state = dict(model.named_parameters())
    num = len(sizes_np)
    plan = _schedule(starts_np, sizes_np, epochs=epochs, batch_size=batch_size, seeds=seeds, device=x.device)
    params = [state[name].detach().unsqueeze(0).repeat(num, *([1] * state[name].ndim)) for name in layers.names]
    penalised = [layers.names.index(name) for name in layers.penalised] if model.l2 != 0.0 else []
    tilt = not negligible_tilt(tau, torch.float32)
    # every step's labels in one gather, and the mean's weight 1/n on each real row of a batch (tau = 0)
    y_steps = y.index_select(0, plan.rows.reshape(-1)).view(plan.rows.shape)
    mean_weight = plan.mask / plan.count.clamp(min=1.0).unsqueeze(2)
    if kernel.binary:
        y_pm = 2.0 * y_steps.to(torch.float32) - 1.0  # labels as -1/+1, as LinearSVM.per_sample_loss
        hinge_coef = -(y_pm * mean_weight)

    with torch.no_grad():
        for step, k in enumerate(plan.active):
            xb = x.index_select(0, plan.rows[step, :k].reshape(-1)).view(k, batch_size, -1)
            p = [t[:k] for t in params]
            scores, cache = layers.forward(p, xb)
            if tilt:
                losses = _losses(model, kernel, scores, y_steps[step, :k])
                weight = _tilt_weights(losses, plan.mask[step, :k], plan.count[step, :k], tau)
            else:
                weight = mean_weight[step, :k]
            if kernel.binary:
                coef = -(y_pm[step, :k] * weight) if tilt else hinge_coef[step, :k]
                g_scores = _hinge_grad(scores, y_pm[step, :k], coef)
            else:
                g_scores = _cross_entropy_grad(scores, y_steps[step, :k], weight)
            grads = layers.backward(p, cache, g_scores)
            for i in penalised:
                grads[i].add_(p[i], alpha=model.l2)
            for param, grad in zip(p, grads):
                if weight_decay != 0.0:
                    grad = grad.add(param, alpha=weight_decay)
                param.add_(grad, alpha=-lr)
            if on_step is not None:
                on_step(step, plan.order[:k].tolist(), dict(zip(layers.names, p)))

        sorted_sizes = sizes_np[plan.order]
        loss_after = _mean_losses(model, kernel, params, x, y, starts_np[plan.order], sorted_sizes)
    # the incoming model is one model: one pass over every device's rows, large products
    own = torch.from_numpy(np.concatenate([np.arange(s, s + n) for s, n in zip(starts_np, sizes_np)])).to(x.device)
    before = evaluate_cohort(model, x.index_select(0, own), y.index_select(0, own), np.cumsum(sizes_np).tolist(), tau)
    host = [t.cpu().numpy() for t in params]
    results: list[TrainResult | None] = [None] * num
    for j, i in enumerate(plan.order):
        results[i] = TrainResult(
            weights={name: values[j] for name, values in zip(layers.names, host)},
            before=before[i],
            loss_after=float(loss_after[j]),
            num_examples=int(sizes_np[i]),
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
    block = min(LOSS_ROWS, key=lambda w: int(np.ceil(sizes / w).sum()) * w + BLOCK_COST_ROWS * -(-int(sizes[0]) // w))
    for first in range(0, int(sizes[0]), block):
        k = int(np.count_nonzero(sizes > first))
        width = min(block, int(sizes[0]) - first)
        offset = torch.arange(first, first + width, device=device)
        mask = offset.unsqueeze(0) < sizes_t[:k].unsqueeze(1)
        rows = torch.where(mask, starts_t[:k].unsqueeze(1) + offset, 0).reshape(-1)
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
