"""Random generators of term_fl.data, one per purpose and device.

Every random choice draws from its own ``numpy.random.default_rng`` seeded by
``[seed, tag]`` (one stream for the whole dataset) or ``[seed, k, tag]`` (one
stream per device k). A client can therefore build device k without drawing
anything for the other devices, and changing one purpose (e.g. the split)
leaves the others untouched.

The tags are distinct and nonzero: ``SeedSequence`` pads its entropy with
zeros, so ``[seed, t]`` equals ``[seed, t, 0]``; a zero tag could collide
with a per-device stream.
"""

from __future__ import annotations

import numbers

import numpy as np

SIZES_TAG = 0xDA7A0001
"""Device sizes of the synthetic dataset (one stream for all devices)."""
DEVICE_TAG = 0xDA7A0002
"""Parameters and samples of one synthetic device."""
SPLIT_TAG = 0xDA7A0003
"""Shuffle of one device before its train / val / test split."""
NOISE_SELECT_TAG = 0xDA7A0004
"""Choice of the noisy devices when only their number is given."""
NOISE_TAG = 0xDA7A0005
"""Corruption of one noisy device."""


def check_seed(seed: object) -> int:
    """Return ``seed`` as an int; raise ``ValueError`` unless it is an integer >= 0."""
    if isinstance(seed, bool) or not isinstance(seed, numbers.Integral) or seed < 0:
        raise ValueError(f"seed must be an integer >= 0, got {seed!r}")
    return int(seed)


def dataset_rng(seed: int, tag: int) -> np.random.Generator:
    """Generator for a choice that concerns the whole dataset: ``default_rng([seed, tag])``."""
    return np.random.default_rng([seed, tag])


def device_rng(seed: int, k: int, tag: int) -> np.random.Generator:
    """Generator for a choice that concerns device k only: ``default_rng([seed, k, tag])``."""
    return np.random.default_rng([seed, k, tag])
