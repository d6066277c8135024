"""The pre-training loss F_k of a scikit-learn estimator.

For a ClientApp that trains an estimator, as Flower's scikit-learn template
does (a ``LogisticRegression`` whose ``coef_`` and ``intercept_`` are the
model): after the received parameters are set on the estimator and before
``fit``, the estimator's loss on the client's training data. By default the
loss the estimator's kind implies:

- a classifier with ``predict_proba``: the log-loss (cross-entropy),
  ``sklearn.metrics.log_loss`` over ``estimator.classes_``;
- a regressor: the squared error (per sample, averaged over the outputs of
  a multi-output regressor), ``sklearn.metrics.mean_squared_error``'s;
- anything else (``SGDClassifier(loss="hinge")``, ``LinearSVC`` ...): pass
  ``loss=``, e.g. ``loss=sklearn.metrics.hinge_loss, response="decision_function"``.

Importing this module imports scikit-learn.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal, overload

import numpy as np
from numpy.typing import ArrayLike
from sklearn.base import is_classifier, is_regressor
from sklearn.metrics import log_loss

from .batches import BatchReduction, LossSum, PreTrainingLoss, batch_total

__all__ = ["PreTrainingLoss", "pre_training_loss"]

Response = Literal["predict", "predict_proba", "decision_function"]


def _default_total(estimator: Any, X: ArrayLike, y: np.ndarray) -> float:
    """The summed loss the estimator's kind implies: log-loss for a classifier, squared error for a regressor."""
    if is_classifier(estimator) and hasattr(estimator, "predict_proba"):
        return float(log_loss(y, estimator.predict_proba(X), labels=estimator.classes_, normalize=False))
    if is_regressor(estimator):
        errors = np.square(np.asarray(estimator.predict(X), dtype=np.float64) - y.astype(np.float64))
        return float(np.sum(errors.reshape(len(y), -1).mean(axis=1)))
    raise TypeError(
        f"pre_training_loss: {type(estimator).__name__} is neither a classifier with predict_proba nor a "
        "regressor; pass its loss, e.g. loss=sklearn.metrics.hinge_loss, response='decision_function'"
    )


@overload
def pre_training_loss(
    estimator: Any,
    X: ArrayLike,
    y: ArrayLike,
    *,
    loss: Callable[[Any, Any], ArrayLike] | None = ...,
    response: Response = ...,
    reduction: BatchReduction = ...,
    with_sum: Literal[False] = ...,
) -> float: ...


@overload
def pre_training_loss(
    estimator: Any,
    X: ArrayLike,
    y: ArrayLike,
    *,
    loss: Callable[[Any, Any], ArrayLike] | None = ...,
    response: Response = ...,
    reduction: BatchReduction = ...,
    with_sum: Literal[True],
) -> PreTrainingLoss: ...


def pre_training_loss(
    estimator: Any,
    X: ArrayLike,
    y: ArrayLike,
    *,
    loss: Callable[[Any, Any], ArrayLike] | None = None,
    response: Response = "predict",
    reduction: BatchReduction = "mean",
    with_sum: bool = False,
) -> float | PreTrainingLoss:
    """F_k: the mean loss of ``estimator`` on ``(X, y)``, without fitting it.

    Call it after setting the received parameters on the estimator (the
    template's ``set_model_params``) and before ``fit``, on the training data;
    send the value as ``train_loss_before`` (:func:`term_fl.plugin.train_metrics`).
    The estimator is only asked for predictions.

    Parameters
    ----------
    estimator : scikit-learn estimator
        The model with the weights the server sent (a Pipeline works too).
    X : array-like of shape (n_samples, n_features)
        The client's training inputs.
    y : array-like of shape (n_samples,) or (n_samples, n_outputs)
        Their targets.
    loss : callable, optional
        ``loss(y, prediction)``, e.g. a ``sklearn.metrics`` loss: a scalar,
        taken as the mean over the samples (or their sum with
        ``reduction="sum"``), or one loss per sample (summed). Default: the
        log-loss of a classifier with ``predict_proba``, the squared error of
        a regressor.
    response : {"predict", "predict_proba", "decision_function"} (default: "predict")
        The estimator's method whose output ``loss`` receives (with ``loss`` only).
    reduction : {"mean", "sum"} (default: "mean")
        What a scalar result of ``loss`` is.
    with_sum : bool (default: False)
        Also return the loss summed over the samples (``train_loss_before_sum``).

    Returns
    -------
    float or PreTrainingLoss
        The mean loss per sample; with ``with_sum``,
        ``PreTrainingLoss(mean, total, num_examples)``.

    Raises
    ------
    ValueError
        When ``y`` holds no sample, or ``response`` is not one of the three methods.
    TypeError
        When no ``loss`` is given and the estimator is neither a classifier
        with ``predict_proba`` nor a regressor.
    """
    targets = np.asarray(y)
    sums = LossSum()
    if len(targets) > 0:
        if loss is None:
            total = _default_total(estimator, X, targets)
        else:
            if response not in ("predict", "predict_proba", "decision_function"):
                raise ValueError(
                    f"response must be 'predict', 'predict_proba' or 'decision_function', got {response!r}"
                )
            total = batch_total(loss(targets, getattr(estimator, response)(X)), len(targets), reduction)
        sums.add(total, len(targets))
    return sums.result(with_sum)
