"""Model arithmetic of the aggregation, in float64, and the cast back to the global model's dtypes.

``w_new = g w + sum_k c_k w_k`` (:func:`combine_models`, one client model at
a time) for the strategies whose round function chooses coefficients c_k and
g (FedAvg: c_k = n_k / sum n, g = 0; TERM and q-FFL: g = 1 - sum_k c_k);
``w_new = g w + (1 - g) M`` (:func:`mix_with_global`) for those that compute
their own aggregate M (a coordinate-wise median).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

import numpy as np
from flwr.app import ArrayRecord
from numpy.typing import NDArray

from term_fl.flower_internals import to_array_record

from .stacked import StackedModels

__all__ = ["cast_like", "combine_models", "mix_with_global", "record_like"]


def combine_models(
    local_models: Iterable[Mapping[str, NDArray]],
    coefficients: Sequence[float],
    global_model: Mapping[str, NDArray] | None = None,
    global_coefficient: float = 0.0,
) -> dict[str, NDArray[np.float64]]:
    """w_new = global_coefficient * w + sum_k c_k w_k, in float64.

    ``local_models``: any iterable of ``{name: array}``, folded into the sum
    one at a time in order, each converted to float64 on its own; a
    :class:`~.stacked.StackedModels` is summed in the same order in one
    running sum over its client axis (the same numbers bit for bit).  The global
    term is skipped when ``global_coefficient`` is 0 (then ``global_model`` may
    be None).
    """
    if isinstance(local_models, StackedModels) and len(local_models):
        total = _combine_stacked(local_models, coefficients)
    else:
        total = _combine_one_by_one(local_models, coefficients)
    if global_coefficient != 0.0:
        if global_model is None:
            raise ValueError("global_model is required when global_coefficient != 0.")
        for k, v in global_model.items():
            total[k] += global_coefficient * np.asarray(v, dtype=np.float64)
    return total


def _combine_one_by_one(
    local_models: Iterable[Mapping[str, NDArray]], coefficients: Sequence[float]
) -> dict[str, NDArray[np.float64]]:
    """sum_k c_k w_k, one model at a time in order."""
    total: dict[str, NDArray[np.float64]] | None = None
    for model, c in zip(local_models, coefficients, strict=True):
        if total is None:
            total = {k: c * np.asarray(v, dtype=np.float64) for k, v in model.items()}
        else:
            for k, v in model.items():
                total[k] += c * np.asarray(v, dtype=np.float64)
    if total is None:
        raise ValueError("combine_models needs at least one local model.")
    return total


def _combine_stacked(models: StackedModels, coefficients: Sequence[float]) -> dict[str, NDArray[np.float64]]:
    """sum_k c_k w_k of stacked models, in the loop's order: ``((c_0 w_0 + c_1 w_1) + c_2 w_2) + ...``.

    Every ``c_k * float64(w_k)`` in one product, then the rows added in
    order: the numbers of :func:`_combine_one_by_one`, bit for bit, with one
    in-place addition per client instead of a conversion, product and addition.
    """
    c = np.asarray(coefficients, dtype=np.float64)
    if c.shape != (len(models),):
        raise ValueError(f"{len(models)} models need as many coefficients, got {c.shape}.")
    total = {}
    for name, values in models.arrays.items():
        products = c.reshape(-1, *[1] * (np.ndim(values) - 1)) * np.asarray(values, dtype=np.float64)
        total[name] = products[0].copy()
        for k in range(1, len(products)):
            total[name] += products[k]
    return total


def mix_with_global(
    model: Mapping[str, NDArray],
    global_model: Mapping[str, NDArray] | None,
    global_coefficient: float,
) -> dict[str, NDArray[np.float64]]:
    """w_new = g w + (1 - g) M, in float64; M itself (as float64) when g is 0 (then ``global_model`` may be None)."""
    if global_coefficient == 0.0:
        return {k: np.asarray(v, dtype=np.float64) for k, v in model.items()}
    if global_model is None:
        raise ValueError("global_model is required when global_coefficient != 0.")
    g = global_coefficient
    return {k: (1.0 - g) * np.asarray(v, dtype=np.float64) + g * np.asarray(global_model[k], dtype=np.float64)
            for k, v in model.items()}


def cast_like(value: NDArray, dtype: np.dtype) -> NDArray:
    """``value`` (float64) in ``dtype``, with its shape (0-d stays 0-d), C-contiguous.

    Integer and boolean arrays (BatchNorm's ``num_batches_tracked``) are
    rounded to the nearest integer (half to even) and clipped to the dtype's
    range; Flower's FedAvg would return them as float64 instead.
    """
    value = np.asarray(value)
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        value = np.clip(np.rint(value), info.min, info.max)
    elif dtype.kind == "b":
        value = np.clip(np.rint(value), 0, 1)
    # np.ascontiguousarray would turn a 0-d array into shape (1,)
    return np.require(value.astype(dtype), requirements="C")


def record_like(arrays: Mapping[str, NDArray], like: ArrayRecord) -> ArrayRecord:
    """An ArrayRecord with the keys (in order), shapes and dtypes of ``like`` holding ``arrays`` (:func:`cast_like`)."""
    return to_array_record({key: cast_like(arrays[key], np.dtype(template.dtype)) for key, template in like.items()})
