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

__all__ = ["CohortTraining", "CompiledTask", "compiler_available", "supports", "train_compiled", "train_compiled_group"]

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


@dataclass(frozen=True)
class CompiledTask:
    """One cohort of a group trained in one compiled call: its incoming model and its devices.

    ``starts``, ``sizes`` and ``seeds`` as for :func:`train_compiled`, the
    rows those of the group's shared ``x``.
    """

    model: TermModel
    starts: Sequence[int]
    sizes: Sequence[int]
    seeds: Sequence[int]


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
    (training,) = train_compiled_group([CompiledTask(model, starts, sizes, seeds)], x, y, lr=lr, epochs=epochs,
                                       batch_size=batch_size, weight_decay=weight_decay, tau=tau)
    return training


def train_compiled_group(
    tasks: Sequence[CompiledTask],
    x: np.ndarray,
    y: np.ndarray,
    *,
    lr: float,
    epochs: int,
    batch_size: int,
    weight_decay: float = 0.0,
    tau: float = 0.0,
) -> list[CohortTraining]:
    """:func:`train_compiled` of several cohorts (several runs' rounds, each from its own global model) in one call.

    The kernel trains each device on its own, so a task's result is the one
    :func:`train_compiled` gives it alone, bit for bit. The tasks' models
    must be of one class and shape, with one penalty.
    """
    # Check the arguments as train_tensors does, and the models, the compiler and the layout
    kernels = _kernels()
    if kernels is None:
        raise RuntimeError("train_compiled needs numba: pip install 'term-fl[fast]'.")
    models = [task.model for task in tasks]
    if not tasks or not all(supports(m, torch.device("cpu")) for m in models):
        names = sorted({type(m).__name__ for m in models}) or ["no model"]
        raise TypeError(f"train_compiled trains LinearSVM and LogisticRegression; got {', '.join(names)}.")
    lr, epochs, batch_size, weight_decay, tau = check_train_args(lr, epochs, batch_size, weight_decay, tau)
    incoming = [_incoming(m) for m in models]
    if len({(type(m), w.shape, float(m.l2)) for m, (w, _) in zip(models, incoming)}) != 1:
        raise ValueError("the tasks of one compiled call need models of one class and shape, with one penalty.")
    layouts = [_layout(x, y, task.starts, task.sizes, task.seeds) for task in tasks]
    starts_np = np.concatenate([starts for starts, _ in layouts])
    sizes_np = np.concatenate([sizes for _, sizes in layouts])
    seeds = np.concatenate([np.asarray(task.seeds, dtype=np.int64).reshape(-1) for task in tasks])
    model_of = np.repeat(np.arange(len(tasks), dtype=np.int64), [len(sizes) for _, sizes in layouts])
    x, y = np.ascontiguousarray(x), np.ascontiguousarray(y)  # the kernels take C-ordered arrays

    # Every device's batches, drawn with its own seed
    rows, steps = device_rows(starts_np, sizes_np, epochs=epochs, batch_size=batch_size, seeds=seeds)

    # Train every device in one compiled call, each from its task's global weights
    weights = np.stack([w for w, _ in incoming])
    biases = np.stack([b for _, b in incoming])
    classes = weights.shape[1]
    tilt = not negligible_tilt(tau, torch.float32)
    trained_w, trained_b = kernels.train_linear(x, y, rows, steps, weights, biases, model_of, lr, weight_decay,
                                                float(models[0].l2), tau if tilt else 0.0, tilt)

    # Report: the incoming models on their devices' rows, and each trained model's mean loss on its own
    incoming_w = np.zeros((len(tasks), *trained_w.shape[1:]), np.float32)
    incoming_w[:, :, :classes] = weights.transpose(0, 2, 1)
    incoming_b = np.zeros((len(tasks), trained_b.shape[1]), np.float32)
    incoming_b[:, :classes] = biases
    losses, hits = kernels.linear_losses(x, y, starts_np, sizes_np, incoming_w, incoming_b, model_of, classes)
    before = segment_results(torch.from_numpy(losses), torch.from_numpy(hits), np.cumsum(sizes_np).tolist(), tau)
    own = np.arange(len(sizes_np), dtype=np.int64)
    after, _ = kernels.linear_losses(x, y, starts_np, sizes_np, trained_w, trained_b, own, classes)
    loss_after = np.add.reduceat(after.astype(np.float64), np.cumsum(sizes_np) - sizes_np) / sizes_np
    stacked = CohortTraining(
        weights={NAMES[0]: np.ascontiguousarray(trained_w[:, :, :classes].transpose(0, 2, 1)),
                 NAMES[1]: np.ascontiguousarray(trained_b[:, :classes])},
        before=before,
        loss_after=loss_after,
        num_examples=sizes_np,
        steps=steps,
    )
    return _split(stacked, [len(sizes) for _, sizes in layouts])


def _incoming(model: TermModel) -> tuple[np.ndarray, np.ndarray]:
    """A linear model's weight ``(C, d)`` and bias ``(C,)`` as C-ordered float32 arrays (not copies where they are)."""
    state = dict(model.named_parameters())
    return tuple(np.ascontiguousarray(state[name].detach().cpu().numpy()) for name in NAMES)  # type: ignore[return-value]


def _split(stacked: CohortTraining, counts: Sequence[int]) -> list[CohortTraining]:
    """The stacked training of several tasks cut into one :class:`CohortTraining` per task (``counts`` devices each)."""
    if len(counts) == 1:
        return [stacked]
    bounds = np.cumsum([0, *counts])
    return [
        CohortTraining(
            weights={name: values[lo:hi] for name, values in stacked.weights.items()},
            before=stacked.before[lo:hi],
            loss_after=stacked.loss_after[lo:hi],
            num_examples=stacked.num_examples[lo:hi],
            steps=stacked.steps[lo:hi],
        )
        for lo, hi in zip(bounds[:-1].tolist(), bounds[1:].tolist())
    ]


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
