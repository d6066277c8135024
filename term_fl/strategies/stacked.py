"""The models of one round's clients, decoded once and stacked: one array per name, a leading client axis.

The reply filter decodes each valid training reply once (it has to, to check
that the values are finite) and stacks the decoded arrays here; the
defences, the round function (q-FFL's distances, Krum's selection, a
coordinate-wise median) and the combine step all read this one stack. An
engine that already holds a round's models stacked can build it directly
(:class:`StackedModels` takes the arrays as they are), without a record per
client.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

__all__ = ["StackedModels"]


@dataclass(frozen=True)
class StackedModels:
    """m client models as one array per name of shape ``(m, *shape)``; row k is client k's array.

    The rows follow the order of the round's valid replies (sorted by
    partition id). Each name's arrays keep their dtype (the clients' common
    one; numpy's promotion of them when clients differ).

    Attributes
    ----------
    arrays : mapping
        Array name -> stacked array, in the global model's key order.
    """

    arrays: Mapping[str, NDArray]

    def __post_init__(self) -> None:
        sizes = {name: np.shape(value)[0] if np.ndim(value) else None for name, value in self.arrays.items()}
        if not sizes or None in sizes.values() or len(set(sizes.values())) != 1:
            raise ValueError(
                f"StackedModels needs at least one array, each with the same leading client axis; got {sizes}"
            )

    @classmethod
    def stack(cls, models: Sequence[Mapping[str, NDArray]]) -> StackedModels:
        """Stack decoded models (one ``{name: array}`` per client, same names and shapes) by name."""
        if not models:
            raise ValueError("StackedModels.stack needs at least one model.")
        return cls({name: np.stack([model[name] for model in models]) for name in models[0]})

    def __len__(self) -> int:
        """The number of clients m."""
        return int(np.shape(next(iter(self.arrays.values())))[0])

    def model(self, k: int) -> dict[str, NDArray]:
        """Client k's model, ``{name: array}`` (views into the stack, not copies)."""
        return {name: value[k] for name, value in self.arrays.items()}

    def __iter__(self) -> Iterator[dict[str, NDArray]]:
        """Each client's model in turn (:meth:`model`)."""
        return (self.model(k) for k in range(len(self)))

    def flat(self) -> NDArray[np.float64]:
        """The models as rows of one float64 matrix ``(m, d)``: every array's values, in key order."""
        return np.concatenate([np.asarray(value, dtype=np.float64).reshape(len(self), -1)
                               for value in self.arrays.values()], axis=1)
