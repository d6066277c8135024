"""The permutations ``torch.randperm`` draws on the CPU from ``torch.Generator().manual_seed(seed)``, without torch.

Local training draws each epoch's order of a device's examples with
``torch.randperm(n, generator)`` (:func:`term_fl.learning.training.train_tensors`).
A client that trains without torch (:mod:`term_fl.learning.linear_numpy`)
must take the same batches, so this module reproduces them:

- torch's CPU generator is the 32-bit Mersenne Twister MT19937, and
  ``manual_seed(seed)`` initialises it with the low 32 bits of the seed
  (``init_genrand``), as numpy's legacy ``RandomState(seed)`` does; its raw
  32-bit outputs come from numpy's ``MT19937`` bit generator put in that state;
- ``randperm(n)`` (for n below 2^32 / 20) starts from ``0..n-1`` and, for
  ``i = 0 .. n-2``, swaps entry ``i`` with entry ``i + (r_i mod (n - i))``,
  ``r_i`` the generator's next output; each epoch continues the stream.

``tests/test_linear_numpy.py`` compares with torch for many seeds and sizes.
"""

from __future__ import annotations

import numpy as np

__all__ = ["randperms"]

_LOW_32_BITS = 0xFFFFFFFF
_SMALL = (2**32 - 1) // 20  # torch takes another algorithm (64-bit draws) from this n on


def _raw_outputs(seed: int, count: int) -> np.ndarray:
    """The first ``count`` 32-bit outputs of torch's CPU generator after ``manual_seed(seed)``, as uint64."""
    legacy = np.random.RandomState(int(seed) & _LOW_32_BITS)  # init_genrand(seed & 0xffffffff), as torch
    generator = np.random.MT19937()
    generator.state = legacy.get_state(legacy=False)
    return generator.random_raw(count).astype(np.uint64)


def randperms(n: int, seed: int, count: int) -> list[np.ndarray]:
    """The ``count`` permutations of ``0..n-1`` that ``count`` calls of ``torch.randperm(n, generator)`` return
    in a row, ``generator = torch.Generator().manual_seed(seed)`` (int64 arrays)."""
    if not 1 <= n < _SMALL:
        raise ValueError(f"randperms reproduces torch.randperm for 1 <= n < {_SMALL}, got n = {n}.")
    draws = _raw_outputs(seed, count * (n - 1)).reshape(count, n - 1)
    offsets = draws % np.arange(n, 1, -1, dtype=np.uint64)  # r_i mod (n - i)
    out = []
    for row in offsets.tolist():
        order = list(range(n))
        for i, offset in enumerate(row):
            j = i + offset
            order[i], order[j] = order[j], order[i]
        out.append(np.array(order, dtype=np.int64))
    return out
