"""Seeded sampling of devices by partition-id (docs/contracts.md, 'Node discovery', 'Determinism').

Flower assigns random node ids per run and its own sampling is not seeded:
once the server knows which node holds which partition, it samples partition
ids with a generator of :func:`term_fl.common.seeding.sampling_rng`, so the same
seed selects the same devices whatever node ids Flower assigns.
:class:`PartitionSampler` is that sampler; :class:`PartitionSampling` is
Flower's FedAvg whose ``configure_train`` / ``configure_evaluate`` use it,
the base of term-fl's template :class:`~term_fl.strategies.FedAvg`.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from logging import INFO, WARNING
from typing import Any, Literal

import numpy as np

from flwr.app import ArrayRecord, ConfigRecord, Message, MessageType, RecordDict
from flwr.serverapp import Grid
from flwr.serverapp.strategy import FedAvg as FlowerFedAvg
from flwr.supercore import log

from term_fl.common.keys import SERVER_ROUND
from term_fl.common.seeding import EVAL_SAMPLING, TRAIN_SAMPLING, sampling_rng

from .instructions import Instructions
from .replies import sent_index

__all__ = ["SAMPLING", "PartitionSampler", "PartitionSampling"]

SAMPLING = ("uniform", "size")
"""How training rounds sample partitions: uniformly, or with probability proportional to n_k."""


class PartitionSampler:
    """Which node holds which partition, and seeded samples of the connected partitions.

    Parameters
    ----------
    node_partitions : mapping
        node_id -> partition_id; each partition belongs to exactly one node.
    seed : int
        The run seed: round r draws from ``sampling_rng(seed, r, stream)``.
    sizes : mapping, optional
        partition_id -> its number of training examples n_k (every partition,
        each > 0): what :meth:`sample` weights by with ``proportional=True``.
    """

    def __init__(self, node_partitions: Mapping[int, int], seed: int, sizes: Mapping[int, int] | None = None) -> None:
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
        self.sizes = None if sizes is None else _checked_sizes(sizes, node_of_partition)

    @property
    def node_partitions(self) -> dict[int, int]:
        """The node_id -> partition_id mapping."""
        return {node: part for part, node in self.node_of_partition.items()}

    def connected(self, node_ids: Iterable[int]) -> list[int]:
        """The sorted partitions whose node is among ``node_ids``."""
        nodes = set(node_ids)
        return sorted(p for p, n in self.node_of_partition.items() if n in nodes)

    def sample(
        self, server_round: int, node_ids: Iterable[int], size: int, stream: int, *, proportional: bool = False
    ) -> list[int]:
        """``size`` partitions (sorted) among those whose node is in ``node_ids`` (the connected ones).

        Drawn without replacement from the sorted connected partition ids with
        ``sampling_rng(seed, server_round, stream)``, uniformly or, with
        ``proportional``, with probabilities proportional to their sizes n_k
        (numpy's successive draws without replacement, as the q-FFL and TERM
        reference code samples); all of them when ``size`` reaches their number.
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
        if not proportional:
            return sorted(int(p) for p in rng.choice(available, size=size, replace=False))
        if self.sizes is None:
            raise ValueError("sampling proportional to n_k needs each partition's number of training examples: "
                             "call set_node_partitions(mapping, sizes={partition_id: n_k})")
        weights = np.array([self.sizes[p] for p in available], dtype=np.float64)
        return sorted(int(p) for p in rng.choice(available, size=size, replace=False, p=weights / weights.sum()))

    def nodes(self, partitions: Iterable[int]) -> list[int]:
        """The node of each partition."""
        return [self.node_of_partition[p] for p in partitions]


def _checked_sizes(sizes: Mapping[int, int], node_of_partition: Mapping[int, int]) -> dict[int, int]:
    """The partition sizes, each a positive integer, one for every partition that has a node."""
    checked = {int(p): n for p, n in sizes.items()}
    missing = sorted(set(node_of_partition) - set(checked))
    if missing:
        raise ValueError(f"sizes: no number of training examples for partitions {missing}")
    bad = {p: n for p, n in checked.items() if isinstance(n, bool) or not isinstance(n, int | np.integer) or n < 1}
    if bad:
        raise ValueError(f"sizes: each partition's number of training examples must be an integer >= 1, got {bad}")
    return checked


class PartitionSampling(FlowerFedAvg):
    """Flower's FedAvg whose ``configure_train`` / ``configure_evaluate`` sample partitions with a seed.

    Once :meth:`set_node_partitions` was called, each round samples
    partition ids (:class:`PartitionSampler`) and sends to their nodes one
    :class:`~.instructions.Instructions` (the Messages, built when a Grid
    iterates them); before, Flower's own sampling applies. It keeps the global model sent
    (:attr:`current_arrays`) and the instructions sent this round (to name
    the node an error reply answers for). ``clients_per_round``, ``seed``
    and ``evaluate_fraction`` are documented in :class:`term_fl.strategies.FedAvg`;
    ``flower`` holds Flower's FedAvg arguments.
    """

    def __init__(
        self,
        *,
        clients_per_round: int | None = None,
        seed: int = 0,
        evaluate_fraction: float = 1.0,
        sampling: Literal["uniform", "size"] = "uniform",
        **flower: Any,
    ) -> None:
        super().__init__(**flower)
        if sampling not in SAMPLING:
            raise ValueError(f"sampling must be one of {', '.join(map(repr, SAMPLING))}, got {sampling!r}.")
        if clients_per_round is not None and (
            isinstance(clients_per_round, bool)
            or not isinstance(clients_per_round, int)
            or clients_per_round < 1
        ):
            raise ValueError(
                f"clients_per_round must be a positive int or None, got {clients_per_round!r}."
            )
        if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
            raise ValueError(f"seed must be a non-negative int, got {seed!r}.")
        if not 0.0 <= evaluate_fraction <= 1.0:
            raise ValueError(f"evaluate_fraction must be in [0, 1], got {evaluate_fraction!r}.")
        self.clients_per_round = clients_per_round
        self.seed = seed
        self.evaluate_fraction = float(evaluate_fraction)
        self.sampling = sampling
        self.current_arrays: ArrayRecord | None = None
        self.partition_sizes: dict[int, float] | None = None
        self._sent: Sequence[Message] = []
        self._sampler: PartitionSampler | None = None
        self._warned_without_table = False

    def set_node_partitions(self, mapping: Mapping[int, int], sizes: Mapping[int, int] | None = None) -> None:
        """Learn which partition each node holds (node_id -> partition_id), and with ``sampling="size"`` their sizes.

        From then on training and evaluation sample partitions with the seeded
        generator and send to their nodes. ``sizes`` (partition_id -> number
        of training examples) is required by ``sampling="size"``, which draws
        each training round's partitions with probabilities proportional to
        it; evaluation samples uniformly.
        """
        if self.sampling == "size" and sizes is None:
            raise ValueError("sampling='size' draws partitions in proportion to their number of training examples: "
                             "call set_node_partitions(mapping, sizes={partition_id: n_k})")
        self._sampler = PartitionSampler(mapping, self.seed, sizes)

    def set_partition_sizes(self, sizes: Mapping[int, float]) -> None:
        """Learn each partition's training size (partition id -> n): a reply that reports another is excluded.

        term-fl's engines call it with the dataset's sizes (the server knows
        them); a Flower app whose server knows them may too.
        """
        self.partition_sizes = {int(p): float(n) for p, n in sizes.items()}

    @property
    def node_partitions(self) -> dict[int, int] | None:
        """The node_id -> partition_id mapping, or None when not set."""
        return None if self._sampler is None else self._sampler.node_partitions

    @property
    def sampling_sizes(self) -> dict[int, int] | None:
        """The partition_id -> n_k mapping given to :meth:`set_node_partitions` (what ``sampling="size"`` draws
        by), or None."""
        return None if self._sampler is None or self._sampler.sizes is None else dict(self._sampler.sizes)

    def sample_partitions(self, server_round: int, grid: Grid, size: int, stream: int) -> list[int]:
        """``size`` partitions (sorted) among those whose node is connected (:meth:`PartitionSampler.sample`).

        Training rounds draw in proportion to n_k with ``sampling="size"``.
        """
        assert self._sampler is not None
        proportional = self.sampling == "size" and stream == TRAIN_SAMPLING
        return self._sampler.sample(server_round, grid.get_node_ids(), size, stream, proportional=proportional)

    def configure_train(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        """Sample partitions (seeded) and send them the global model."""
        self.current_arrays = arrays.copy()
        if self._sampler is None:
            self._warn_without_table()
            return self._remember(super().configure_train(server_round, arrays, config, grid))
        config[SERVER_ROUND] = server_round
        total = len(self._sampler.node_of_partition)
        if self.clients_per_round is not None:
            size = self.clients_per_round
        elif self.fraction_train == 0.0:
            return []
        else:
            size = max(int(total * self.fraction_train), self.min_train_nodes)
        partitions = self.sample_partitions(server_round, grid, size, stream=TRAIN_SAMPLING)
        return self._messages_to_partitions(partitions, arrays, config, MessageType.TRAIN, total)

    def configure_evaluate(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        """Sample ceil(evaluate_fraction * P) partitions (seeded) for evaluation."""
        if self._sampler is None:
            self._warn_without_table()
            return self._remember(super().configure_evaluate(server_round, arrays, config, grid))
        config[SERVER_ROUND] = server_round
        count = len(self._sampler.connected(grid.get_node_ids()))
        # the small offset keeps e.g. ceil(0.3 * 10) at 3 despite rounding
        size = math.ceil(self.evaluate_fraction * count - 1e-9)
        if size == 0:
            return []
        partitions = self.sample_partitions(server_round, grid, size, stream=EVAL_SAMPLING)
        return self._messages_to_partitions(partitions, arrays, config, MessageType.EVALUATE, count)

    def _warn_without_table(self) -> None:
        """Say once that term-fl's sampling keywords wait for :meth:`set_node_partitions` (Flower samples until then)."""
        given = [f"{name}={value!r}" for name, value, default in (
            ("clients_per_round", self.clients_per_round, None), ("seed", self.seed, 0),
            ("evaluate_fraction", self.evaluate_fraction, 1.0)) if value != default]
        if given and not self._warned_without_table:
            self._warned_without_table = True
            log(WARNING, "%s: %s take effect once set_node_partitions was called (the partition of each node: "
                "term_fl.plugin.partitions.node_partitions(grid) learns it); until then Flower's unseeded sampling "
                "by fraction_train / fraction_evaluate / min_train_nodes applies", type(self).__name__,
                ", ".join(given))

    def _messages_to_partitions(
        self, partitions: list[int], arrays: ArrayRecord, config: ConfigRecord, message_type: str, total: int
    ) -> Sequence[Message]:
        assert self._sampler is not None
        log(INFO, "%s: sampled partitions %s (%d of %d)",
            "configure_train" if message_type == MessageType.TRAIN else "configure_evaluate",
            partitions, len(partitions), total)
        record = RecordDict({self.arrayrecord_key: arrays, self.configrecord_key: config})
        return self._remember(Instructions(record, self._sampler.nodes(partitions), message_type))

    def _remember(self, messages: Iterable[Message]) -> Sequence[Message]:
        """Keep this round's instructions: the grid gives them ids when it pushes them."""
        self._sent = messages if isinstance(messages, Instructions) else list(messages)
        return self._sent

    def _sent_index(self) -> dict[str, tuple[int, int | None]]:
        return sent_index(self._sent, self.node_partitions)

    def summary(self) -> None:
        """Log the sampling settings, then Flower's."""
        log(INFO, "\t├──> term-fl sampling:")
        log(INFO, "\t│\t├── clients_per_round: %s | sampling: %s | evaluate_fraction: %.2f | seed: %d",
            self.clients_per_round, self.sampling, self.evaluate_fraction, self.seed)
        log(INFO, "\t│\t└── partitions known: %s",
            "no (Flower sampling)" if self._sampler is None else len(self._sampler.node_of_partition))
        super().summary()
