"""The model registry: one entry per model, the only list of them.

An entry names the model (``model.name`` of a scenario), how people call it,
where its class is (a :class:`~term_fl.learning.models.TermModel` with a
``build`` class method, imported on first use: reading the registry needs
no torch) and its settings model (the scenario's ``[model.<name>]`` table). The scenario schema, :func:`~term_fl.learning.models.build_model`
and :func:`~term_fl.learning.models.model_for` read this list: adding a
model is one module (its class and settings) and one entry here; its
written-out gradients for the cohort executor are optional
(:mod:`term_fl.learning.cohort_training`).
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from term_fl.common.settings import SettingsModel

from .model_settings import LinearSVMSettings, LogisticRegressionSettings, MLPSettings

if TYPE_CHECKING:
    from .models import TermModel

__all__ = ["MODELS", "ModelSpec", "model_spec"]


@dataclass(frozen=True)
class ModelSpec:
    """One model as the rest of term-fl sees it.

    Attributes
    ----------
    name : str
        Its value of ``model.name``.
    label : str
        How people call it ("linear SVM").
    model_ref : str
        Where its class lives, ``"module:Name"``: a
        :class:`~term_fl.learning.models.TermModel` subclass whose
        ``build(settings, num_features, num_classes, seed)`` makes one,
        imported on first use (:attr:`model`; torch comes with it).
    settings : type
        Its settings model: the fields of the scenario's ``[model.<name>]`` table.
    """

    name: str
    label: str
    model_ref: str
    settings: type[SettingsModel]

    @property
    def model(self) -> type[TermModel]:
        """The model's class (its module imported now)."""
        module, _, name = self.model_ref.partition(":")
        return getattr(importlib.import_module(module), name)

    def build(self, settings: SettingsModel, num_features: int, num_classes: int, seed: int) -> TermModel:
        """The model ``settings`` describe, for data of ``num_features`` and ``num_classes``, initialised from ``seed``."""
        return self.model.build(settings, num_features, num_classes, seed)

    def validated(self, settings: Mapping[str, Any]) -> SettingsModel:
        """``settings`` validated by the settings model; a ValueError naming the model, key and value."""
        return self.settings.of(f"model {self.name}", settings)


MODELS: dict[str, ModelSpec] = {
    spec.name: spec
    for spec in (
        ModelSpec("linear_svm", "linear SVM", "term_fl.learning.models:LinearSVM", LinearSVMSettings),
        ModelSpec("logreg", "softmax regression", "term_fl.learning.models:LogisticRegression",
                  LogisticRegressionSettings),
        ModelSpec("mlp", "MLP", "term_fl.learning.models:MLP", MLPSettings),
    )
}


def model_spec(name: str) -> ModelSpec:
    """The registered model ``name``; a ValueError listing the registered names otherwise."""
    try:
        return MODELS[name]
    except KeyError:
        raise ValueError(f"Unknown model {name!r}; expected one of {', '.join(MODELS)}.") from None
