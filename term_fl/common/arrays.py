"""Input validation shared by the pure-math modules (tilting, fairness)."""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike, NDArray


def finite_vector(values: ArrayLike, name: str = "values") -> NDArray[np.float64]:
    """Return ``values`` as a non-empty, finite, 1-D float64 array; ValueError naming ``name`` otherwise."""
    try:
        array = np.asarray(values, dtype=np.float64)
    except (TypeError, ValueError) as err:
        raise ValueError(f"{name} must be a 1-D sequence of real numbers: {err}") from err
    if array.ndim != 1:
        raise ValueError(f"{name} must be 1-D, got an array of shape {array.shape}.")
    if array.size == 0:
        raise ValueError(f"{name} must hold at least one value, got none.")
    if not np.all(np.isfinite(array)):
        raise ValueError(f"{name} must be finite (no NaN or inf), got {array.tolist()}.")
    return array
