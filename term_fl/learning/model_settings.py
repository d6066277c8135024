"""Each built-in model's settings (a scenario's ``[model.<name>]`` table), without torch.

The model classes (:mod:`term_fl.learning.models`) import torch; their
settings do not, so the scenario schema and a ClientApp that trains without
torch (:mod:`term_fl.clientapp.linear_app`) read them without it.
"""

from __future__ import annotations

from pydantic import Field

from term_fl.common.settings import SettingsModel

__all__ = ["LinearSVMSettings", "LogisticRegressionSettings", "MLPSettings"]


class LinearSVMSettings(SettingsModel):
    """The linear SVM's settings (a scenario's ``[model.linear_svm]`` table)."""

    l2: float = Field(1e-3, ge=0.0, le=100.0, description="L2 penalty of the linear SVM")


class LogisticRegressionSettings(SettingsModel):
    """Softmax regression has no settings of its own (the papers' model is unregularised)."""


class MLPSettings(SettingsModel):
    """The MLP's settings (a scenario's ``[model.mlp]`` table)."""

    hidden: int = Field(64, ge=1, le=100_000, description="width of the hidden layer")
