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
  ``[run seed, round, partition-id, stream]`` as one 63-bit seed
  (:func:`derive_seeds`: the same seeds for many partitions at once).

The data tags are distinct and nonzero: ``SeedSequence`` pads its entropy
with zeros, so ``[seed, t]`` equals ``[seed, t, 0]``; a zero tag could collide
with a per-device stream.
"""

from __future__ import annotations

import numbers
from collections.abc import Sequence

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


# numpy's SeedSequence hash (numpy/random/bit_generator.pyx, after M. O'Neill's seed_seq_fe): its
# constants, and the size of its pool in 32-bit words.
_POOL_SIZE = 4
_INIT_A, _MULT_A, _INIT_B, _MULT_B = 0x43B0D7E5, 0x931E8875, 0x8B51F9DD, 0x58F38DED
_MIX_MULT_L, _MIX_MULT_R, _XSHIFT = 0xCA01F9DD, 0x4973F715, 16
_MASK = 0xFFFFFFFF

# A 32-bit word of the hash: a Python int, or a uint64 array of such words (one per partition).
_Word = int | np.ndarray


def _hashmix(value: _Word, const: int) -> tuple[_Word, int]:
    """SeedSequence's ``hashmix``: the mixed word, and the hash constant it moves on to."""
    value = value ^ const
    const = (const * _MULT_A) & _MASK
    value = (value * const) & _MASK
    return value ^ (value >> _XSHIFT), const


def _mix(x: _Word, y: _Word) -> _Word:
    """SeedSequence's ``mix`` of two words."""
    result = (_MIX_MULT_L * x - _MIX_MULT_R * y) & _MASK
    return result ^ (result >> _XSHIFT)


def derive_seeds(
    run_seed: int, server_round: int, partition_ids: Sequence[int] | np.ndarray, stream: int = CLIENT_TRAINING
) -> np.ndarray:
    """:func:`derive_seed` of many partitions at once: int64 ``(len(partition_ids),)``, the same seeds bit for bit.

    ``SeedSequence``'s hash of the four words ``[run seed, round, partition,
    stream]``, computed once for the words every partition shares (Python
    ints) and side by side for the partitions (uint64 arrays holding 32-bit
    words); its constants change with each step, never with the data.
    Entropy words of 2^32 or more make ``SeedSequence`` split them into more
    words: those take :func:`derive_seed` one by one.
    """
    pids = np.asarray(partition_ids, dtype=np.int64).reshape(-1)
    fixed = (int(run_seed), int(server_round), int(stream))
    if pids.size == 0:
        return np.zeros(0, dtype=np.int64)
    if min(*fixed, int(pids.min())) < 0 or max(*fixed, int(pids.max())) > _MASK:
        return np.array([derive_seed(*fixed[:2], int(p), fixed[2]) for p in pids], dtype=np.int64)
    # The pool: each word hashed, then every word mixed into every other
    const = _INIT_A
    pool: list[_Word] = []
    for word in (fixed[0], fixed[1], pids.astype(np.uint64), fixed[2]):
        mixed, const = _hashmix(word, const)
        pool.append(mixed)
    for src in range(_POOL_SIZE):
        for dst in range(_POOL_SIZE):
            if src != dst:
                mixed, const = _hashmix(pool[src], const)
                pool[dst] = _mix(pool[dst], mixed)
    # generate_state(1, uint64): two 32-bit words (little-endian), then the top bit dropped
    words = []
    const = _INIT_B
    for src in range(2):
        value = pool[src] ^ const
        const = (const * _MULT_B) & _MASK
        value = (value * const) & _MASK
        words.append(np.asarray(value ^ (value >> _XSHIFT), dtype=np.uint64))
    state = np.broadcast_to(words[0] | (words[1] << np.uint64(32)), pids.shape)
    return (state >> np.uint64(1)).astype(np.int64)
