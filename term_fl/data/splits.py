"""Seeded train / validation / test split of one device.

Each device is shuffled with its own generator (``[seed, k, SPLIT_TAG]``,
see :mod:`term_fl.common.seeding`) and cut into train, val and test, in that
order of the shuffled samples.

Rounding rule, for a device of n samples and fractions
(f_train, f_val, f_test):

    n_test  = max(1, round_half_up(f_test * n))
    n_val   = max(1, round_half_up(f_val * n))
    n_train = n - n_val - n_test

If that leaves n_train < 1 (tiny devices), one sample at a time moves from
the larger of val / test (test on a tie) to train until n_train = 1. Every
split therefore holds at least one sample, and a device needs at least 3
samples. Example: the 7-sample vehicle device at 50/20/30 gets 4 / 1 / 2.

``min_test`` (a scenario's ``data.min_test_samples``, default 0: the rule
above alone) raises a device's test split to min(min_test, n - 2) samples
when the rule gives it fewer, taking them from train down to one sample,
then from validation down to one: small devices then hold enough test
samples for their accuracy to mean something (the 7-sample device with
min_test = 4 gets 2 / 1 / 4; a 20-sample device at 50/20/30 with
min_test = 10 gets 6 / 4 / 10). Devices the rule already gives min_test test samples are split
as before.
"""

from __future__ import annotations

import math
import numbers

import numpy as np

from .errors import DataError

MIN_DEVICE_SAMPLES = 3
"""A device needs one sample in each of train, val and test."""

_ROUNDING_TOLERANCE = 1e-9
"""Absorbs float fuzz in f * n (0.7 * 5 = 3.4999999999999996) before rounding half up."""


def check_fractions(train: float, val: float, test: float) -> tuple[float, float, float]:
    """Return the fractions as floats; raise ``ValueError`` unless each is > 0 and they sum to 1 (within 1e-9)."""
    given = f"train_fraction={train!r}, val_fraction={val!r}, test_fraction={test!r}"
    values = (train, val, test)
    if not all(isinstance(v, numbers.Real) and not isinstance(v, bool) for v in values):
        raise ValueError(f"split fractions must be numbers; got {given}")
    fractions = tuple(float(v) for v in values)
    if not all(math.isfinite(f) and f > 0 for f in fractions):
        raise ValueError(f"split fractions must each be > 0; got {given}")
    if abs(sum(fractions) - 1.0) > 1e-9:
        raise ValueError(f"split fractions must sum to 1; got {given} (sum {sum(fractions):.12g})")
    return fractions  # type: ignore[return-value]


def split_sizes(
    num_samples: int, fractions: tuple[float, float, float], *, device: str = "device", min_test: int = 0
) -> tuple[int, int, int]:
    """Return ``(n_train, n_val, n_test)`` by the module's rounding rule (and ``min_test``, see above).

    ``device`` names the device in the error raised when it has fewer than 3 samples.
    """
    n = int(num_samples)
    if n < MIN_DEVICE_SAMPLES:
        raise DataError(
            f"{device} has {n} samples; at least {MIN_DEVICE_SAMPLES} are needed "
            "to keep one sample in each of train, val and test"
        )
    _, f_val, f_test = fractions
    n_test = max(1, _round_half_up(f_test * n))
    n_val = max(1, _round_half_up(f_val * n))
    while n - n_val - n_test < 1:
        if n_test >= n_val:
            n_test -= 1
        else:
            n_val -= 1
    if n_test < min_test:
        # take the missing test samples from train (down to one), then from validation (down to one)
        n_test = min(min_test, n - 2)
        n_val = max(1, min(n_val, n - n_test - 1))
    return n - n_val - n_test, n_val, n_test


def split_indices(
    num_samples: int,
    fractions: tuple[float, float, float],
    rng: np.random.Generator,
    *,
    device: str = "device",
    min_test: int = 0,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Shuffle ``0..num_samples-1`` with ``rng`` and cut it into train, val and test indices.

    The three arrays partition the samples: each index appears exactly once.
    """
    n_train, n_val, _ = split_sizes(num_samples, fractions, device=device, min_test=min_test)
    order = rng.permutation(num_samples)
    return order[:n_train], order[n_train : n_train + n_val], order[n_train + n_val :]


def _round_half_up(value: float) -> int:
    return math.floor(value + 0.5 + _ROUNDING_TOLERANCE)
