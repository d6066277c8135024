"""What a user's own Flower app adds to run term-fl's strategies.

term-fl's strategies (:mod:`term_fl.strategies`) are Flower strategies: a
ServerApp swaps them in for Flower's. TERM, q-FFL and AFL weight each client
by F_k, the loss of the received global model on the client's training data
before local training; the ClientApp measures it with the helper of its
framework, each in a module of its own that imports only that framework:

- PyTorch: :func:`pre_training_loss` (:mod:`.losses`);
- NumPy: ``term_fl.plugin.numpy_loss.pre_training_loss`` (a ``loss_fn(params, x, y)``);
- JAX / Flax: ``term_fl.plugin.jax_loss.pre_training_loss`` (the same, on JAX arrays);
- scikit-learn: ``term_fl.plugin.sklearn_loss.pre_training_loss`` (log-loss,
  squared error, or a given loss);

and sends it with :func:`train_metrics`, which spells the metric keys
(``train_loss_before``, ``train_loss_before_sum``, ``num-examples``,
``partition-id``). The names here load on first use: importing this package
imports neither torch, jax nor scikit-learn.
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = ["TRAIN_LOSS_BEFORE", "TRAIN_LOSS_BEFORE_SUM", "PreTrainingLoss", "pre_training_loss", "train_metrics"]

_HOMES = {
    "TRAIN_LOSS_BEFORE": "term_fl.common.keys",
    "TRAIN_LOSS_BEFORE_SUM": "term_fl.common.keys",
    "PreTrainingLoss": "term_fl.plugin.batches",
    "pre_training_loss": "term_fl.plugin.losses",  # PyTorch's, as in term-fl 0.2
    "train_metrics": "term_fl.plugin.metrics",
}


def __getattr__(name: str) -> Any:
    if name in _HOMES:
        return getattr(importlib.import_module(_HOMES[name]), name)
    raise AttributeError(f"module 'term_fl.plugin' has no attribute {name!r}")
