"""Every random generator of term-fl, derived from seeds in one place.

Every random choice draws from its own ``numpy.random.default_rng`` (or a
seed derived with ``numpy.random.SeedSequence``) keyed by the seed and by what
the choice concerns, so both engines, every client and the server make the
same choices for the same seed, whatever order work happens in, and changing
one purpose leaves the others untouched:

- the data (:func:`dataset_rng`, :func:`device_rng`): ``[data seed, tag]`` for
  a choice about the whole dataset, ``[data seed, k, tag]`` for device k, so a
  client builds device k without drawing anything for the others;
- the server's sampling of devices (:func:`sampling_rng`):
  ``[run seed, round, stream]``;
- a client's local training (:func:`derive_seed`):
  ``[run seed, round, partition-id, stream]`` as one 63-bit seed.

The data tags are distinct and nonzero: ``SeedSequence`` pads its entropy
with zeros, so ``[seed, t]`` equals ``[seed, t, 0]``; a zero tag could collide
with a per-device stream.
"""

from __future__ import annotations

import numbers

import numpy as np

# -- the data ---------------------------------------------------------------------

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
CONCEPT_TAG = 0xDA7A0006
"""The shared labelling functions (concepts) of a two-concept synthetic dataset."""
MINORITY_TAG = 0xDA7A0007
"""Choice of the devices that follow the minority concept."""


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


# -- the federation -----------------------------------------------------------------

# Stream tags keep independent choices independent for the same (seed, round).
TRAIN_SAMPLING = 0
EVAL_SAMPLING = 1
CLIENT_TRAINING = 2


def sampling_rng(run_seed: int, server_round: int, stream: int) -> np.random.Generator:
    """Generator of the server's sampling in one round: ``default_rng([run seed, round, stream])``."""
    return np.random.default_rng([int(run_seed), int(server_round), int(stream)])


def derive_seed(run_seed: int, server_round: int, partition_id: int, stream: int = CLIENT_TRAINING) -> int:
    """A 63-bit seed for one (run seed, round, partition, stream) combination."""
    state = np.random.SeedSequence([int(run_seed), int(server_round), int(partition_id), int(stream)])
    return int(state.generate_state(1, dtype=np.uint64)[0] >> np.uint64(1))
