"""One reply per node and per partition in a round, each consistent with what the server knows.

The reply filter (:mod:`.replies`, :mod:`.cohort_replies`) checks each reply
on its own; these checks look across a round's valid replies and at the
server's tables, and exclude, with a warning naming the node, a reply that

1. comes from a node that already replied this round (a replayed or
   duplicated message: the first is kept, the others dropped);
2. contradicts the node table, once :meth:`~.sampling.PartitionSampling.set_node_partitions`
   gave one: its node holds another partition, or another node holds the
   partition it reports;
3. claims a partition that another node's reply claims too (both excluded:
   the server cannot tell which one holds it);
4. reports a ``num-examples`` other than its partition's training size,
   where the server knows the sizes (term-fl's own engines:
   :meth:`~.fedavg.FedAvg.set_partition_sizes`);
5. (AFL) carries no partition id, or one outside the table.

So a replayed reply is counted once, and one node cannot speak for another
node's partition (docs/contracts.md, 'Replies').
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from logging import WARNING
from typing import Any

from flwr.supercore import log

from .replies import TrainReplies, partition_id_of
from .reports import ExcludedReply, reply_name
from .stacked import StackedModels

__all__ = ["one_reply_each", "trusted_replies"]


def _partition_problem(
    node: int, partition: int | None, node_partitions: Mapping[int, int] | None, holders: Mapping[int, int],
    require_partition: bool,
) -> str | None:
    """Why a reply's partition id contradicts the node table (rules 2, 5), or None; ``holders``: partition -> node."""
    if require_partition and partition is None:
        return "no usable partition-id (an integer) in its metrics"
    if node_partitions is None:
        return None
    held = node_partitions.get(node)
    if held is not None and partition is not None and partition != held:
        return f"reports partition-id {partition}, but node {node} holds partition {held}"
    if held is None and partition is not None and partition in holders:
        return f"reports partition-id {partition}, which node {holders[partition]} holds"
    if require_partition and partition not in holders:
        return f"partition-id {partition} is not in the partition table (set_node_partitions)"
    return None


def one_reply_each(  # noqa: PLR0913
    node_ids: Sequence[int],
    metrics: Sequence[Mapping[str, Any]],
    *,
    partition_key: str,
    node_partitions: Mapping[int, int] | None = None,
    partition_sizes: Mapping[int, float] | None = None,
    size_key: str | None = None,
    require_partition: bool = False,
    context: str = "aggregate",
) -> tuple[list[int], list[ExcludedReply]]:
    """The indices of the replies to keep (in order), and the replies excluded with the reason (each logged).

    Parameters
    ----------
    node_ids, metrics : sequences
        The round's valid replies: each one's node and metrics (as a dict), in order.
    partition_key : str
        Metric key of the partition id.
    node_partitions : mapping, optional
        node id -> partition id, when the server has the table.
    partition_sizes : mapping, optional
        partition id -> its training size, checked against ``metrics[size_key]``.
    require_partition : bool
        A reply must carry a partition id of the table (AFL).
    """
    partitions = [partition_id_of(m, partition_key) for m in metrics]
    reasons: list[str | None] = [None] * len(node_ids)
    # 1. One reply per node: the first is kept
    seen: set[int] = set()
    for k, node in enumerate(node_ids):
        if node in seen:
            reasons[k] = f"a second reply from node {node} this round (one reply per node: the first is kept)"
        seen.add(node)
    # 2, 5. The node table: each node speaks for its own partition
    holders: dict[int, int] = {}  # partition -> the first node the table gives it
    for node, partition in (node_partitions or {}).items():
        holders.setdefault(partition, node)
    for k, (node, partition) in enumerate(zip(node_ids, partitions, strict=True)):
        if reasons[k] is None:
            reasons[k] = _partition_problem(node, partition, node_partitions, holders, require_partition)
    # 3. One reply per partition: a partition two nodes claim is left out of the round
    claimants: dict[int, list[int]] = {}
    for node, partition, reason in zip(node_ids, partitions, reasons, strict=True):
        if reason is None and partition is not None:
            claimants.setdefault(partition, []).append(node)
    for k, partition in enumerate(partitions):
        nodes = claimants.get(partition, []) if reasons[k] is None else []
        if len(nodes) > 1:
            reasons[k] = (f"partition {partition} is claimed by nodes {', '.join(map(str, sorted(nodes)))}: "
                          "one reply per partition, none of them is used")
    # 4. The training size the server knows for the partition
    for k, partition in enumerate(partitions):
        expected = None if partition_sizes is None or partition is None else partition_sizes.get(partition)
        if reasons[k] is None and expected is not None and size_key is not None and metrics[k][size_key] != expected:
            reasons[k] = (f"reports {size_key} = {metrics[k][size_key]!r}, but partition {partition} has "
                          f"{expected:g} training examples")
    # Log each exclusion; keep the rest in order
    excluded = []
    for node, partition, reason in zip(node_ids, partitions, reasons, strict=True):
        if reason is not None:
            excluded.append(ExcludedReply(node, partition, reason))
            log(WARNING, "%s: excluding reply from %s: %s", context, reply_name(node, partition), reason)
    return [k for k, reason in enumerate(reasons) if reason is None], excluded


def trusted_replies(train: TrainReplies, **options: Any) -> TrainReplies:
    """``train`` without the replies :func:`one_reply_each` excludes (``train`` itself when it excludes none)."""
    keep, excluded = one_reply_each(train.node_ids, train.metrics, **options)
    if not excluded:
        return train
    models = None if not keep or train.models is None else StackedModels(
        {name: values[keep] for name, values in train.models.arrays.items()})
    return TrainReplies([train.node_ids[k] for k in keep], [train.metrics[k] for k in keep], models,
                        [*train.excluded, *excluded])
