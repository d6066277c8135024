"""Models with per-sample losses: linear SVM, softmax regression, one-hidden-layer MLP.

Every model is a :class:`TermModel`: ``forward(x)`` gives scores, and the
loss is exposed *per sample* (``per_sample_loss``) so that training can tilt
it (TERM's sample-level tilt, see :func:`term_fl.learning.training.tilted_mean`).
Labels are ``int64`` class indices ``0..C-1``; the linear SVM maps 0/1 to
-1/+1 inside its loss.

The L2 term lives in the model (``penalty()``, ``(l2 / 2) * sum ||W||^2``
over the weight matrices, never the biases) so that the SVM is the usual
regularised hinge-loss objective; only the SVM has ``l2`` among its settings
(the softmax models of the papers are unregularised; their classes still
accept ``l2``). ``train(..., weight_decay=...)`` is a separate,
optimiser-side decay on every parameter.

Each model declares its settings (a scenario's ``[model.<name>]`` table) as
a :class:`~term_fl.common.settings.SettingsModel` (in
:mod:`term_fl.learning.model_settings`, importable without torch), and a
``build(settings, num_features, num_classes, seed)`` class method; the model
registry (:mod:`term_fl.learning.registry`) names both, and
:func:`build_model` / :func:`model_for` build any registered model.

The linear models start at zero (their objectives are convex); the MLP
starts from PyTorch's default ``nn.Linear`` initialisation drawn from a
local ``torch.Generator`` seeded with ``seed``, so building a model never
touches the global RNG.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .model_settings import LinearSVMSettings, LogisticRegressionSettings, MLPSettings


class TermModel(nn.Module):
    """Base class: scores, per-sample loss, prediction and L2 penalty.

    Subclasses define ``forward``. The defaults here are those of a
    ``C``-class softmax model: cross-entropy per sample and argmax
    prediction.

    Parameters
    ----------
    num_features : int
        Input dimension ``d``.
    num_classes : int
        Number of classes ``C``; labels are ``0..C-1``.
    l2 : float
        Coefficient of ``penalty() = (l2 / 2) * sum ||W||^2`` over the weight
        matrices (parameters named ``*weight``), biases excluded. 0 disables it.
    """

    def __init__(self, num_features: int, num_classes: int, l2: float) -> None:
        super().__init__()
        self.num_features = num_features
        self.num_classes = num_classes
        self.l2 = l2

    @classmethod
    def build(cls, settings: Any, num_features: int, num_classes: int, seed: int) -> TermModel:
        """The model of ``settings`` (its settings model's instance) with a deterministic initialisation.

        Subclasses registered in :mod:`term_fl.learning.registry` define it;
        ``num_features`` >= 1 and ``num_classes`` >= 2 are checked by the caller.
        """
        raise NotImplementedError(f"{cls.__name__} does not define build(settings, num_features, num_classes, seed)")

    def per_sample_loss(self, scores: Tensor, y: Tensor) -> Tensor:
        """Cross-entropy of each sample: ``Tensor[n]``, ``y`` int64 class indices."""
        return F.cross_entropy(scores, y, reduction="none")

    def predict(self, scores: Tensor) -> Tensor:
        """Predicted class index of each sample: ``Tensor[n]`` int64, the first of tied maxima.

        ``max(dim=1).indices`` is ``argmax(dim=1)`` (both return the first
        maximal index) and several times faster on the CPU.
        """
        return scores.max(dim=1).indices

    def penalty(self) -> Tensor:
        """``(l2 / 2) * sum ||W||^2`` over the weight matrices (a 0-dim tensor; 0 if ``l2 == 0``)."""
        weights = self._penalised()
        if self.l2 == 0.0:
            return torch.zeros((), dtype=weights[0].dtype, device=weights[0].device)
        squares = [w.pow(2).sum() for w in weights]
        total = squares[0] if len(squares) == 1 else torch.stack(squares).sum()
        return (self.l2 / 2.0) * total

    def _penalised(self) -> list[Tensor]:
        """The weight matrices (subclasses name theirs directly: this runs every step)."""
        return [p for name, p in self.named_parameters() if name.endswith("weight")]


class LinearSVM(TermModel):
    """Binary linear SVM: score ``s = w.x + b``, hinge loss ``max(0, 1 - y_pm s)``.

    ``y_pm = 2 y - 1`` maps the class indices 0/1 to -1/+1; the prediction
    is class 1 where ``s > 0``. Scores have shape ``(n,)``. Starts at zero.
    """

    def __init__(self, num_features: int, l2: float = 1e-3) -> None:
        super().__init__(num_features, 2, l2)
        self.linear = _zero_linear(num_features, 1)

    @classmethod
    def build(cls, settings: LinearSVMSettings, num_features: int, num_classes: int, seed: int) -> LinearSVM:
        """A binary SVM at zero with the settings' ``l2`` (the seed changes nothing)."""
        if num_classes != 2:
            raise ValueError(
                f"linear_svm is a binary classifier: num_classes must be 2, got {num_classes}. "
                "Use 'logreg' or 'mlp' for more classes."
            )
        return cls(num_features, settings.l2)

    def forward(self, x: Tensor) -> Tensor:
        return self.linear(x).squeeze(-1)

    def _penalised(self) -> list[Tensor]:
        return [self.linear.weight]

    def per_sample_loss(self, scores: Tensor, y: Tensor) -> Tensor:
        y_pm = 2.0 * y.to(scores.dtype) - 1.0
        return torch.clamp(1.0 - y_pm * scores, min=0.0)

    def predict(self, scores: Tensor) -> Tensor:
        return (scores > 0).long()


class LogisticRegression(TermModel):
    """Multinomial logistic (softmax) regression: ``C`` logits ``W x + b``. Starts at zero."""

    def __init__(self, num_features: int, num_classes: int, l2: float = 0.0) -> None:
        super().__init__(num_features, num_classes, l2)
        self.linear = _zero_linear(num_features, num_classes)

    @classmethod
    def build(cls, settings: LogisticRegressionSettings, num_features: int, num_classes: int,
              seed: int) -> LogisticRegression:
        """Softmax regression at zero, without a penalty (the seed changes nothing)."""
        return cls(num_features, num_classes)

    def forward(self, x: Tensor) -> Tensor:
        return self.linear(x)

    def _penalised(self) -> list[Tensor]:
        return [self.linear.weight]


class MLP(TermModel):
    """One hidden ReLU layer of width ``hidden``, then ``C`` logits.

    Initialised like PyTorch's ``nn.Linear`` from a local generator seeded with ``seed``.
    """

    def __init__(self, num_features: int, num_classes: int, hidden: int = 64, l2: float = 0.0, seed: int = 0) -> None:
        super().__init__(num_features, num_classes, l2)
        generator = torch.Generator().manual_seed(int(seed))
        self.hidden = _seeded_linear(num_features, hidden, generator)
        self.output = _seeded_linear(hidden, num_classes, generator)

    @classmethod
    def build(cls, settings: MLPSettings, num_features: int, num_classes: int, seed: int) -> MLP:
        """An MLP of ``hidden`` units initialised from ``seed``, without a penalty."""
        return cls(num_features, num_classes, settings.hidden, seed=seed)

    def forward(self, x: Tensor) -> Tensor:
        return self.output(torch.relu(self.hidden(x)))

    def _penalised(self) -> list[Tensor]:
        return [self.hidden.weight, self.output.weight]


def _linear(in_features: int, out_features: int) -> nn.Linear:
    """An ``nn.Linear`` whose default initialisation leaves the global RNG as it was.

    The caller overwrites the parameters. Not ``nn.utils.skip_init``: its
    ``to_empty`` imports sympy through torch's symbolic shapes (about 1 s,
    and 5 s on a loaded machine, in every fresh ClientApp process of the
    Deployment Engine).
    """
    with torch.random.fork_rng(devices=[]):
        return nn.Linear(in_features, out_features)


def _zero_linear(in_features: int, out_features: int) -> nn.Linear:
    """An ``nn.Linear`` at zero (built without drawing from the global RNG)."""
    layer = _linear(in_features, out_features)
    with torch.no_grad():
        layer.weight.zero_()
        layer.bias.zero_()
    return layer


def _seeded_linear(in_features: int, out_features: int, generator: torch.Generator) -> nn.Linear:
    """An ``nn.Linear`` with PyTorch's default initialisation, drawn from ``generator``."""
    layer = _linear(in_features, out_features)
    with torch.no_grad():
        nn.init.kaiming_uniform_(layer.weight, a=math.sqrt(5), generator=generator)
        bound = 1.0 / math.sqrt(in_features)
        nn.init.uniform_(layer.bias, -bound, bound, generator=generator)
    return layer


def build_model(name: str, num_features: int, num_classes: int, *, seed: int = 0, **settings: Any) -> TermModel:
    """Build a registered model with a deterministic initialisation (CPU, float32).

    Parameters
    ----------
    name : str
        A registered model (:data:`term_fl.learning.registry.MODELS`):
        ``linear_svm`` (binary: ``num_classes`` must be 2), ``logreg``, ``mlp``.
    num_features : int
        Input dimension, at least 1.
    num_classes : int
        Number of classes, at least 2.
    seed : int, default 0
        Seed of the initialisation where a model draws one (the MLP's, from a
        local ``torch.Generator``: the global RNG state is left untouched).
        The linear models start at zero, so the seed does not change them.
    **settings
        The model's own settings, the fields of its settings model
        (``linear_svm``: ``l2``, default 1e-3, the penalty
        ``(l2 / 2) ||w||^2`` without the bias; ``mlp``: ``hidden``, default
        64; ``logreg``: none), with the model's defaults; another model's
        setting is an error.
    """
    from .registry import model_spec  # the registry names this module's classes

    spec = model_spec(name)
    if num_features < 1:
        raise ValueError(f"num_features must be >= 1, got {num_features}.")
    if num_classes < 2:
        raise ValueError(f"num_classes must be >= 2, got {num_classes}.")
    return spec.build(spec.validated(settings), num_features, num_classes, seed)


def model_for(scenario: Any, dataset: Any, seed: int | None = None) -> TermModel:
    """A fresh model of a scenario's ``[model]`` table for ``dataset`` (initialised from ``seed``, default run.seed).

    ``scenario`` is a :class:`term_fl.config.Scenario` and ``dataset`` a
    :class:`term_fl.data.FederatedDataset` (read, not imported).
    """
    from .registry import model_spec

    return model_spec(scenario.model.name).build(scenario.model.settings, dataset.num_features, dataset.num_classes,
                                                 scenario.run.seed if seed is None else seed)


def get_weights(model: nn.Module) -> dict[str, np.ndarray]:
    """The model's state as float32 numpy copies on the CPU, in ``state_dict`` order."""
    return {
        key: np.array(value.detach().cpu().numpy(), dtype=np.float32, copy=True)
        for key, value in model.state_dict().items()
    }


def set_weights(model: nn.Module, weights: Mapping[str, np.ndarray]) -> None:
    """Copy ``weights`` (as from :func:`get_weights`) into ``model``, in place.

    The keys must match the model's ``state_dict`` exactly and every shape
    must agree; values are cast to the model's dtype and device.
    """
    state = model.state_dict()
    missing = [key for key in state if key not in weights]
    extra = [key for key in weights if key not in state]
    if missing or extra:
        raise ValueError(
            f"Weights do not match the model's parameters: missing keys {missing}, "
            f"unexpected keys {extra}; expected exactly {list(state)}."
        )
    tensors = {}
    for key, target in state.items():
        value = torch.as_tensor(np.asarray(weights[key]))
        if tuple(value.shape) != tuple(target.shape):
            raise ValueError(
                f"Shape mismatch for {key!r}: the model expects {tuple(target.shape)}, "
                f"got {tuple(value.shape)}."
            )
        tensors[key] = value
    # What load_state_dict does for plain parameters and buffers (state_dict()
    # shares their storage), without its per-module hook machinery: a hot path.
    with torch.no_grad():
        for key, target in state.items():
            target.copy_(tensors[key])
