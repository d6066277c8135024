"""Local training and evaluation on one device's arrays (PyTorch, no Flower).

``train`` runs plain minibatch SGD on the sample-level tilted loss of
hierarchical TERM (Li, Beirami, Sanjabi, Smith, "On Tilted Losses in Machine
Learning", JMLR 2023, J(t, tau)): each batch minimises

    tilted_mean(per_sample_loss, tau) + penalty(),
    tilted_mean(l, tau) = (1/tau) log mean_i exp(tau l_i),

which is the ordinary mean loss at ``tau = 0``; ``tau < 0`` down-weights
high-loss samples (noisy labels), ``tau > 0`` up-weights them. ``evaluate``
reports the data loss (no penalty) of a model, mean, sum and tau-tilted: the
tilted value of the *incoming* model is the F_k a client sends the server.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence

import numpy as np
import torch
from torch import Tensor

from term_fl.learning.results import EvalResult, TrainResult, check_finite, check_train_args
from term_fl.learning.models import TermModel, get_weights

DEVICE_FORMS = ('"auto"', '"cpu"', '"cuda"', '"cuda:<index>"')


def resolve_device(spec: str) -> torch.device:
    """Turn a device setting into a ``torch.device``.

    ``"auto"`` is the first CUDA device when ``torch.cuda.is_available()``,
    else the CPU; ``"cpu"``, ``"cuda"`` and ``"cuda:<index>"`` are taken as
    given. Asking for CUDA where there is none raises ``RuntimeError``; any
    other string raises ``ValueError``.
    """
    if not isinstance(spec, str):
        raise ValueError(f"Device must be a string, one of {', '.join(DEVICE_FORMS)}; got {spec!r}.")
    text = spec.strip().lower()
    if text == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if text == "cpu":
        return torch.device("cpu")
    match = re.fullmatch(r"cuda(?::(\d+))?", text)
    if match is None:
        raise ValueError(f"Unknown device {spec!r}; expected one of {', '.join(DEVICE_FORMS)}.")
    if not torch.cuda.is_available():
        raise RuntimeError(
            f"Device {spec!r} asks for CUDA, but torch finds no CUDA device "
            f"(torch {torch.__version__}); use device 'cpu' or 'auto'."
        )
    if match.group(1) is None:
        return torch.device("cuda")
    index = int(match.group(1))
    count = torch.cuda.device_count()
    if index >= count:
        raise RuntimeError(f"Device {spec!r} does not exist: torch sees {count} CUDA device(s), 0..{count - 1}.")
    return torch.device("cuda", index)


def negligible_tilt(tau: float, dtype: torch.dtype) -> bool:
    """Whether ``tau`` is too small to tilt losses of ``dtype``: ``|tau| < sqrt(smallest normal)``.

    Below it ``tau l`` could underflow and the tilt (about ``tau var(l) / 2``)
    is far below rounding, so :func:`tilted_mean` returns the plain mean.
    """
    return abs(tau) < math.sqrt(torch.finfo(dtype).tiny)


def tilted_mean(losses: Tensor, tau: float) -> Tensor:
    """Sample-level tilted loss ``(1/tau) log mean_i exp(tau l_i)``, differentiable.

    ``tau = 0`` is exactly ``losses.mean()`` (the limit). It tends to
    ``max(l)`` as ``tau -> +inf`` and to ``min(l)`` as ``tau -> -inf``; its
    gradient in ``l_i`` is the tilted weight ``softmax(tau l)_i``.

    Computed as a log-sum-exp shifted by ``c``, the loss with the largest
    ``tau l`` (so no exponent is positive: finite for ``|tau|`` of hundreds
    and losses in the thousands), in the form
    ``c + (1/tau) log1p(mean_i expm1(tau (l_i - c)))``. Unlike
    ``(torch.logsumexp(tau l) - log n) / tau``, which cancels catastrophically
    near ``tau = 0`` (float32, tau = 1e-6: 1.07 for a mean of 1.17), this
    stays accurate as ``tau -> 0``. Below ``|tau| = sqrt(smallest normal
    float)`` of the losses' dtype (1e-19 in float32) ``tau l`` could underflow
    and the tilt (about ``tau var(l) / 2``) is far below rounding: the mean
    is returned.
    """
    if losses.ndim != 1 or losses.numel() == 0:
        raise ValueError(f"tilted_mean needs a non-empty 1-D tensor of losses, got shape {tuple(losses.shape)}.")
    tau = float(tau)
    if negligible_tilt(tau, losses.dtype):
        return losses.mean()
    shift = (losses.max() if tau > 0 else losses.min()).detach()
    return shift + torch.log1p(torch.expm1(tau * (losses - shift)).mean()) / tau


def as_tensors(model: TermModel, x: np.ndarray, y: np.ndarray, device: torch.device) -> tuple[Tensor, Tensor]:
    """Check ``(x, y)`` against the model and return them on ``device`` (float32 / int64).

    On the CPU the tensors share memory with float32 / int64 arrays (no
    copy). :func:`train_tensors` and :func:`evaluate_segments` take what this
    returns, so a caller that keeps them skips the checks and conversions on
    every later call.
    """
    x = np.asarray(x)
    y = np.asarray(y)
    if x.ndim != 2 or x.shape[1] != model.num_features:
        raise ValueError(f"x must have shape (n, {model.num_features}), got {x.shape}.")
    if y.shape != (x.shape[0],):
        raise ValueError(f"y must have shape ({x.shape[0]},) to match x, got {y.shape}.")
    if x.shape[0] == 0:
        raise ValueError("Need at least one example, got an empty x.")
    if not np.issubdtype(y.dtype, np.integer):
        raise ValueError(f"y must hold integer class indices, got dtype {y.dtype}.")
    if y.min() < 0 or y.max() >= model.num_classes:
        raise ValueError(
            f"Labels must be class indices 0..{model.num_classes - 1}, got values in "
            f"[{y.min()}, {y.max()}] (map -1/+1 labels to 0/1 first)."
        )
    x_t = torch.as_tensor(x, dtype=torch.float32).to(device)
    y_t = torch.as_tensor(y, dtype=torch.int64).to(device)
    return x_t, y_t


def move_model(model: TermModel, device: torch.device) -> None:
    """``model.to(device)``, skipped when every parameter is there already (a hot path per message)."""
    if any(p.device != device for p in model.parameters()):
        model.to(device)


@torch.no_grad()
def _scores_and_losses(model: TermModel, x: Tensor, y: Tensor, batch_size: int) -> tuple[Tensor, Tensor]:
    """Scores and per-sample data losses of ``model`` on ``(x, y)``, in eval mode, batch by batch.

    The model is left in the train/eval mode it had.
    """
    was_training = model.training
    if was_training:
        model.eval()
    try:
        if x.shape[0] <= batch_size:
            scores = model(x)
            return scores, model.per_sample_loss(scores, y)
        parts = [model(x[start : start + batch_size]) for start in range(0, x.shape[0], batch_size)]
        scores = torch.cat(parts)
        return scores, model.per_sample_loss(scores, y)
    finally:
        if was_training:
            model.train()


def _mean_loss(model: TermModel, x: Tensor, y: Tensor) -> float:
    """Mean per-sample data loss, accumulated in float64."""
    _, losses = _scores_and_losses(model, x, y, 4096)
    return float(losses.double().sum()) / losses.numel()


def evaluate_segments(
    model: TermModel, x: Tensor, y: Tensor, ends: Sequence[int], tau: float = 0.0, batch_size: int = 4096
) -> list[EvalResult]:
    """Evaluate ``model`` on consecutive segments of ``(x, y)`` in one pass.

    ``ends`` are the segment boundaries (increasing, the last one ``len(x)``):
    segment i is ``x[ends[i-1]:ends[i]]``, so ``[n_val, n_val + n_test]``
    evaluates a validation and a test split stacked in one tensor. ``x`` and
    ``y`` are as :func:`as_tensors` returns them, on the model's device. The
    model is evaluated in eval mode and left in the mode it had. Losses are
    accumulated in float64.
    """
    check_segment_ends(ends, x.shape[0])
    scores, losses = _scores_and_losses(model, x, y, batch_size)
    with torch.no_grad():
        hit = model.predict(scores) == y
    return segment_results(losses, hit, ends, tau)


def check_segment_ends(ends: Sequence[int], n: int) -> None:
    """Raise ``ValueError`` unless ``ends`` increase from >= 1 to at most ``n`` (segments are non-empty)."""
    bounds = [0, *ends]
    if any(not start < end <= n for start, end in zip(bounds, bounds[1:])):
        raise ValueError(f"segment ends must increase from 1 to {n}, got {list(ends)}.")


def segment_results(losses: Tensor, hit: Tensor, ends: Sequence[int], tau: float = 0.0) -> list[EvalResult]:
    """:class:`EvalResult` of each segment from per-sample data losses and hits (prediction == label).

    Losses are accumulated in float64; segment i is ``[ends[i-1], ends[i])``.
    """
    hit_np = hit.cpu().numpy()
    loss = losses.double().cpu()
    loss_np = loss.numpy()
    bounds = [0, *(int(end) for end in ends)]
    starts, stops = bounds[:-1], bounds[1:]
    # every segment's count of hits in one call (integers: exact)
    corrects = np.add.reduceat(hit_np[:stops[-1]].astype(np.int64), starts).tolist() if stops else []
    results = []
    for start, end, correct in zip(starts, stops, corrects, strict=True):
        size = end - start
        loss_sum = float(loss_np[start:end].sum())
        loss_mean = loss_sum / size
        tilted = loss_mean if tau == 0.0 else float(tilted_mean(loss[start:end], tau))
        results.append(EvalResult(loss_mean=loss_mean, loss_sum=loss_sum, loss_tilted=tilted,
                                  accuracy=correct / size, correct=correct, examples=size))
    return results


def evaluate(
    model: TermModel,
    x: np.ndarray,
    y: np.ndarray,
    *,
    device: torch.device | str,
    tau: float = 0.0,
    batch_size: int = 4096,
) -> EvalResult:
    """Loss and accuracy of ``model`` on ``(x, y)``, without gradients.

    Parameters
    ----------
    model : TermModel
        Moved to ``device`` (in place); left in the train/eval mode it had.
    x, y : np.ndarray
        Features ``(n, d)`` and class indices ``(n,)``, n >= 1.
    device : torch.device or str
        Where to compute (a string goes through :func:`resolve_device`).
    tau : float, default 0.0
        Sample-level tilt of ``loss_tilted``.
    batch_size : int, default 4096
        Examples per forward pass (memory only; the result does not depend on it
        beyond float32 rounding of the scores).

    Losses are the data losses without the penalty, accumulated in float64.
    """
    tau = check_finite("tau", tau)
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}.")
    device = resolve_device(device) if isinstance(device, str) else device
    move_model(model, device)
    x_t, y_t = as_tensors(model, x, y, device)
    return evaluate_segments(model, x_t, y_t, [x_t.shape[0]], tau, batch_size)[0]


@torch.no_grad()
def _sgd_step(params: list[Tensor], lr: float, weight_decay: float) -> None:
    """One step of ``torch.optim.SGD(params, lr, weight_decay=weight_decay)`` (no momentum).

    The same operations as torch's single-tensor SGD, so the same bits
    (``tests/test_training.py`` checks it), without the optimizer object's
    per-step machinery, which costs more than the step on small models.
    """
    for p in params:
        grad = p.grad
        if grad is None:
            continue
        if weight_decay != 0.0:
            grad = grad.add(p, alpha=weight_decay)
        p.add_(grad, alpha=-lr)


def train(
    model: TermModel,
    x: np.ndarray,
    y: np.ndarray,
    *,
    lr: float,
    epochs: int,
    batch_size: int,
    weight_decay: float = 0.0,
    tau: float = 0.0,
    seed: int,
    device: torch.device | str,
) -> TrainResult:
    """Train ``model`` in place with minibatch SGD on the tau-tilted loss plus penalty.

    Parameters
    ----------
    model : TermModel
        The incoming (e.g. global) model; trained in place on ``device``.
    x, y : np.ndarray
        Training features ``(n, d)`` and class indices ``(n,)``, n >= 1.
    lr : float
        SGD learning rate, > 0.
    epochs : int
        Passes over the data, >= 1.
    batch_size : int
        Examples per step, >= 1; at least n means one full-batch step per
        epoch (in the data's order, no shuffling).
    weight_decay : float, default 0.0
        SGD weight decay (as ``torch.optim.SGD``'s) on every parameter, >= 0 (on top of
        the model's own ``penalty()``).
    tau : float, default 0.0
        Sample-level tilt of each batch's loss (``tilted_mean``); 0 is
        ordinary training, < 0 resists noisy labels.
    seed : int
        Seeds the ``torch.Generator`` that draws each epoch's permutation
        (the global RNG is not used). Same seed, same data, same device:
        identical weights on the CPU.
    device : torch.device or str
        Where to train (a string goes through :func:`resolve_device`).

    Returns
    -------
    TrainResult
        ``before`` is :func:`evaluate` of the incoming model on ``(x, y)``
        with this ``tau``; ``steps`` is ``epochs * ceil(n / batch_size)``.
    """
    device = resolve_device(device) if isinstance(device, str) else device
    move_model(model, device)
    x_t, y_t = as_tensors(model, x, y, device)
    return train_tensors(
        model, x_t, y_t, lr=lr, epochs=epochs, batch_size=batch_size, weight_decay=weight_decay, tau=tau, seed=seed
    )


def train_tensors(
    model: TermModel,
    x: Tensor,
    y: Tensor,
    *,
    lr: float,
    epochs: int,
    batch_size: int,
    weight_decay: float = 0.0,
    tau: float = 0.0,
    seed: int,
) -> TrainResult:
    """:func:`train` on tensors from :func:`as_tensors`, on the device of ``x`` where the model is.

    The hot path of a client that keeps its device's tensors between rounds:
    the data are not checked again. The model is left in the train/eval mode
    it had.
    """
    lr, epochs, batch_size, weight_decay, tau = check_train_args(lr, epochs, batch_size, weight_decay, tau)

    # F_k: the incoming model's loss on the training data, before any step
    n = x.shape[0]
    before = evaluate_segments(model, x, y, [n], tau)[0]

    # Minibatch SGD on the tau-tilted batch loss plus the model's penalty, in train mode
    params = [p for p in model.parameters() if p.requires_grad]
    generator = torch.Generator().manual_seed(int(seed))
    was_training = model.training
    model.train()
    steps = 0
    for _ in range(int(epochs)):
        for x_batch, y_batch in _epoch_batches(x, y, batch_size, generator):
            loss = tilted_mean(model.per_sample_loss(model(x_batch), y_batch), tau) + model.penalty()
            for p in params:
                p.grad = None
            loss.backward()
            _sgd_step(params, lr, weight_decay)
            steps += 1
    model.train(was_training)

    # The trained weights (CPU copies) and their mean loss on the same data
    return TrainResult(
        weights=get_weights(model),
        before=before,
        loss_after=_mean_loss(model, x, y),
        num_examples=n,
        steps=steps,
    )


def _epoch_batches(x: Tensor, y: Tensor, batch_size: int, generator: torch.Generator) -> list[tuple[Tensor, Tensor]]:
    """One epoch's batches of ``(x, y)``.

    All of it in order when it fits one batch (no draw); else one
    ``randperm`` from ``generator``, drawn on the CPU (the same seed gives the
    same batches on every device), cut into batches of ``batch_size`` with a
    smaller last batch.
    """
    n = x.shape[0]
    if batch_size >= n:
        return [(x, y)]
    order = torch.randperm(n, generator=generator).to(x.device)
    return [(x[idx], y[idx]) for idx in order.split(batch_size)]
