"""Seeded sampling of devices by partition-id (docs/contracts.md, 'Node discovery', 'Determinism').

Flower assigns random node ids per run and its own sampling is not seeded:
once the server knows which node holds which partition, it samples partition
ids with a generator of :func:`term_fl.common.seeding.sampling_rng`, so the same
seed selects the same devices whatever node ids Flower assigns.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from logging import WARNING

from flwr.supercore import log

from term_fl.common.seeding import sampling_rng

__all__ = ["PartitionSampler"]


class PartitionSampler:
    """Which node holds which partition, and seeded samples of the connected partitions.

    Parameters
    ----------
    node_partitions : mapping
        node_id -> partition_id; each partition belongs to exactly one node.
    seed : int
        The run seed: round r draws from ``sampling_rng(seed, r, stream)``.
    """

    def __init__(self, node_partitions: Mapping[int, int], seed: int) -> None:
        node_of_partition: dict[int, int] = {}
        for node, partition in node_partitions.items():
            if partition in node_of_partition:
                raise ValueError(
                    f"partition {partition} is mapped to two nodes "
                    f"({node_of_partition[partition]} and {node}); each partition "
                    "must belong to exactly one node."
                )
            node_of_partition[int(partition)] = int(node)
        self.node_of_partition = node_of_partition
        self.seed = seed

    @property
    def node_partitions(self) -> dict[int, int]:
        """The node_id -> partition_id mapping."""
        return {node: part for part, node in self.node_of_partition.items()}

    def connected(self, node_ids: Iterable[int]) -> list[int]:
        """The sorted partitions whose node is among ``node_ids``."""
        nodes = set(node_ids)
        return sorted(p for p, n in self.node_of_partition.items() if n in nodes)

    def sample(self, server_round: int, node_ids: Iterable[int], size: int, stream: int) -> list[int]:
        """``size`` partitions (sorted) among those whose node is in ``node_ids`` (the connected ones).

        Drawn without replacement from the sorted connected partition ids with
        ``sampling_rng(seed, server_round, stream)``; all of them when ``size``
        reaches their number.
        """
        available = self.connected(node_ids)
        if size > len(available):
            log(
                WARNING,
                "Round %d: %d partitions requested but only %d connected; sampling all.",
                server_round,
                size,
                len(available),
            )
            size = len(available)
        if size == len(available):
            return available
        rng = sampling_rng(self.seed, server_round, stream)
        return sorted(int(p) for p in rng.choice(available, size=size, replace=False))

    def nodes(self, partitions: Iterable[int]) -> list[int]:
        """The node of each partition."""
        return [self.node_of_partition[p] for p in partitions]
