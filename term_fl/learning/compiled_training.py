"""The linear models' local training as one compiled kernel for a whole cohort (numba), on the CPU.

:func:`train_compiled` is :func:`term_fl.learning.cohort_training.train_cohort`
for a linear SVM or a logistic regression, with every device's local SGD in
one call of :func:`term_fl.learning.linear_kernels.train_linear`: the same
batches (each device's permutations drawn with its own seed,
:func:`term_fl.learning.cohort_batches.device_rows`), the same objective
(the sample-level tilted loss, the model's penalty, weight decay) and the
same report (the incoming model's loss on the device's rows, mean, sum and
tau-tilted, and accuracy; the trained model's mean loss), equal to
:func:`term_fl.learning.training.train_tensors` to float32 rounding.

Why a kernel: a linear model's SGD step with a batch of 10 is a few
thousand multiply-adds, and the batched torch path spends 10-15 us of
dispatch on each of its ~7 tensor calls per step, while the arithmetic takes
under 1 us. Compiled, a step is the arithmetic alone. numba was chosen by
measurement (benchmarks/README.md, group ``arith``): one kernel for any
cohort, compiled once per machine and cached, against ``torch.compile`` of
the batched step, which compiled for 80 s and then ran slower than eager
torch (each step stays a call into a compiled graph).

numba is optional (the ``fast`` extra): :func:`compiler_available` says
whether it imports, and the callers fall back to the batched torch path.
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Sequence
from dataclasses import dataclass
from types import ModuleType

import numpy as np
import torch

from term_fl.learning.cohort_batches import device_rows
from term_fl.learning.models import LinearSVM, LogisticRegression, TermModel
from term_fl.learning.training import (
    EvalResult,
    TrainResult,
    check_train_args,
    negligible_tilt,
    segment_results,
)

__all__ = ["CohortTraining", "compiler_available", "supports", "train_compiled"]

NAMES = ("linear.weight", "linear.bias")
"""The parameters of both linear models, in ``state_dict`` order."""


@functools.cache
def _kernels() -> ModuleType | None:
    """:mod:`term_fl.learning.linear_kernels`, or None when numba does not import."""
    try:
        return importlib.import_module("term_fl.learning.linear_kernels")
    except ImportError:
        return None


def compiler_available() -> bool:
    """Whether numba imports here (``pip install 'term-fl[fast]'``)."""
    return _kernels() is not None


def supports(model: TermModel, device: torch.device) -> bool:
    """Whether :func:`train_compiled` trains ``model`` on ``device``: a linear model, on the CPU."""
    return type(model) in (LinearSVM, LogisticRegression) and device.type == "cpu"


@dataclass(frozen=True)
class CohortTraining:
    """A cohort's training outcome, stacked: row k of every array is the k-th device given.

    ``weights`` maps each parameter name to a float32 array ``(K, *shape)``;
    ``before`` is each device's incoming-model report, ``loss_after`` the
    trained models' mean losses, ``num_examples`` and ``steps`` per device.
    """

    weights: dict[str, np.ndarray]
    before: list[EvalResult]
    loss_after: np.ndarray
    num_examples: np.ndarray
    steps: np.ndarray

    @classmethod
    def stack(cls, results: Sequence[TrainResult]) -> CohortTraining:
        """The stacked form of per-device results (their weights stacked by name, in their order)."""
        return cls(
            weights={name: np.stack([r.weights[name] for r in results]) for name in results[0].weights},
            before=[r.before for r in results],
            loss_after=np.array([r.loss_after for r in results], dtype=np.float64),
            num_examples=np.array([r.num_examples for r in results], dtype=np.int64),
            steps=np.array([r.steps for r in results], dtype=np.int64),
        )

    def results(self) -> list[TrainResult]:
        """One :class:`TrainResult` per device (its weights are views into the stacked arrays)."""
        return [
            TrainResult(
                weights={name: values[k] for name, values in self.weights.items()},
                before=self.before[k],
                loss_after=float(self.loss_after[k]),
                num_examples=int(self.num_examples[k]),
                steps=int(self.steps[k]),
            )
            for k in range(len(self.before))
        ]


def train_compiled(
    model: TermModel,
    x: np.ndarray,
    y: np.ndarray,
    starts: Sequence[int],
    sizes: Sequence[int],
    *,
    lr: float,
    epochs: int,
    batch_size: int,
    weight_decay: float = 0.0,
    tau: float = 0.0,
    seeds: Sequence[int],
) -> CohortTraining:
    """Train device k of the cohort on rows ``starts[k] : starts[k] + sizes[k]`` from the weights ``model`` holds.

    Parameters
    ----------
    model : TermModel
        A linear SVM or logistic regression (:func:`supports`) holding the
        incoming global weights; it is not changed.
    x, y : np.ndarray
        Every device's rows, float32 ``(N, d)`` and int64 ``(N,)``, as
        :func:`term_fl.learning.training.as_tensors` checks them (on the CPU
        its tensors' ``.numpy()``).
    starts, sizes : sequence of int
        Each device's first row and number of training examples (>= 1).
    lr, epochs, batch_size, weight_decay, tau
        As for :func:`term_fl.learning.training.train`, the same for every device.
    seeds : sequence of int
        Each device's seed: its batches are those ``train_tensors`` draws with it.

    Returns
    -------
    CohortTraining
        The devices in input order.
    """
    # Check the arguments as train_tensors does, and the model, the compiler and the layout
    kernels = _kernels()
    if kernels is None:
        raise RuntimeError("train_compiled needs numba: pip install 'term-fl[fast]'.")
    if not supports(model, torch.device("cpu")):
        raise TypeError(f"train_compiled trains LinearSVM and LogisticRegression; got {type(model).__name__}.")
    lr, epochs, batch_size, weight_decay, tau = check_train_args(lr, epochs, batch_size, weight_decay, tau)
    starts_np, sizes_np = _layout(x, y, starts, sizes, seeds)

    # Every device's batches, drawn with its own seed
    rows, steps = device_rows(starts_np, sizes_np, epochs=epochs, batch_size=batch_size, seeds=seeds)

    # Train every device in one compiled call, from the global weights
    state = dict(model.named_parameters())
    weight = state[NAMES[0]].detach().cpu().numpy()
    bias = state[NAMES[1]].detach().cpu().numpy()
    tilt = not negligible_tilt(tau, torch.float32)
    trained_w, trained_b = kernels.train_linear(x, y, rows, steps, weight, bias, lr, weight_decay,
                                                float(model.l2), tau if tilt else 0.0, tilt)

    # Report: the incoming model on every device's rows, and each trained model's mean loss on its own
    losses, hits = kernels.linear_losses(x, y, starts_np, sizes_np, np.ascontiguousarray(weight.T)[None], bias[None])
    ends = np.cumsum(sizes_np).tolist()
    before = segment_results(torch.from_numpy(losses), torch.from_numpy(hits), ends, tau)
    after, _ = kernels.linear_losses(x, y, starts_np, sizes_np, trained_w, trained_b)
    loss_after = np.add.reduceat(after.astype(np.float64), np.cumsum(sizes_np) - sizes_np) / sizes_np
    return CohortTraining(
        weights={NAMES[0]: np.ascontiguousarray(trained_w.transpose(0, 2, 1)), NAMES[1]: trained_b},
        before=before,
        loss_after=loss_after,
        num_examples=sizes_np,
        steps=steps,
    )


def _layout(
    x: np.ndarray, y: np.ndarray, starts: Sequence[int], sizes: Sequence[int], seeds: Sequence[int]
) -> tuple[np.ndarray, np.ndarray]:
    """``starts`` and ``sizes`` as int64 arrays; ValueError unless the arrays and every device's rows fit."""
    if x.dtype != np.float32 or x.ndim != 2 or y.dtype != np.int64 or y.shape != (x.shape[0],):
        raise ValueError(
            f"x must be float32 (N, d) and y int64 (N,); got {x.dtype} {x.shape} and {y.dtype} {y.shape}."
        )
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
