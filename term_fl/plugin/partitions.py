"""Which node holds which partition, for a Flower app's ServerApp: the query, and the ClientApp's answer.

Flower gives nodes random ids per run; a strategy that indexes clients by
partition (AFL) or samples them with a seed (``clients_per_round``, ``seed``,
``evaluate_fraction``) needs the table node id -> partition id. Two lines
give it to any Flower app, without torch or the rest of term-fl:

ClientApp (the node answers with ``context.node_config["partition-id"]``)::

    from term_fl.plugin.partitions import partition_reply
    app.query()(partition_reply)

ServerApp, before ``strategy.start``::

    from term_fl.plugin.partitions import node_partitions
    strategy.set_node_partitions(node_partitions(grid, expected=num_partitions))

AFL also reads each train reply's partition id: send it with
``train_metrics(loss_before, partition_id=context.node_config["partition-id"])``.
"""

from __future__ import annotations

import time
from collections.abc import Iterable

from flwr.app import ConfigRecord, Message, MessageType, MetricRecord, RecordDict
from flwr.serverapp import Grid

from term_fl.clientapp.node_query import partition_reply
from term_fl.common.keys import CONFIG, PARTITION_ID

__all__ = ["PartitionQueryError", "node_partitions", "partition_reply"]

QUERY_TRIES = 3  # a node whose answer failed is asked at most this often


class PartitionQueryError(RuntimeError):
    """The nodes did not tell their partitions: too few connected, no answer, or two nodes with one partition."""


def _answer(reply: Message) -> int | None:
    """The partition id a reply to the query carries, or None (an error reply, or no ``partition-id``)."""
    if reply.has_error() or not reply.has_content():
        return None
    for record in reply.content.values():
        if isinstance(record, MetricRecord) and isinstance(record.get(PARTITION_ID), int) and record[PARTITION_ID] >= 0:
            return int(record[PARTITION_ID])
    return None


def _ask(grid: Grid, node_ids: Iterable[int], timeout: float) -> dict[int, int | None]:
    """One query message per node: node id -> the partition it answered (None: no usable answer)."""
    asked = list(node_ids)
    messages = [Message(RecordDict({CONFIG: ConfigRecord({})}), dst_node_id=node, message_type=MessageType.QUERY)
                for node in asked]
    answers: dict[int, int | None] = dict.fromkeys(asked)
    for reply in grid.send_and_receive(messages, timeout=timeout):
        if reply.metadata.src_node_id in answers:
            answers[reply.metadata.src_node_id] = _answer(reply)
    return answers


def node_partitions(grid: Grid, expected: int | None = None, *, timeout: float = 60.0,
                    poll_s: float = 0.5) -> dict[int, int]:
    """Ask every connected node which partition it holds: ``{node_id: partition_id}``.

    Waits up to ``timeout`` seconds for ``expected`` nodes to connect (for
    one node when None), asks each (a node whose answer failed is asked again,
    3 times in all), and returns the table for ``strategy.set_node_partitions``.

    Raises
    ------
    PartitionQueryError
        Fewer than ``expected`` nodes within ``timeout``; a node that does not
        answer with a ``partition-id`` (its ClientApp lacks
        ``app.query()(partition_reply)`` or its node config lacks
        ``partition-id``); two nodes that hold one partition.
    """
    deadline = time.monotonic() + timeout
    # Wait for the nodes
    while len(node_ids := sorted(grid.get_node_ids())) < (expected or 1):
        if time.monotonic() > deadline:
            raise PartitionQueryError(f"only {len(node_ids)} of {expected or 1} nodes connected within {timeout:g} s")
        time.sleep(poll_s)
    # Ask them, the ones without an answer again
    answers: dict[int, int | None] = dict.fromkeys(node_ids)
    for _ in range(QUERY_TRIES):
        missing = [node for node, pid in answers.items() if pid is None]
        if not missing:
            break
        answers.update(_ask(grid, missing, max(1.0, deadline - time.monotonic())))
    silent = [node for node, pid in answers.items() if pid is None]
    if silent:
        raise PartitionQueryError(
            f"nodes {silent[:20]} did not answer the partition query with a '{PARTITION_ID}': their ClientApp needs "
            "`app.query()(partition_reply)` (from term_fl.plugin.partitions import partition_reply) and a node "
            f"config with '{PARTITION_ID}' (Flower's Simulation Engine sets it; a SuperNode takes "
            f"--node-config 'partition-id=N')"
        )
    # One node per partition
    holder: dict[int, int] = {}
    for node, pid in answers.items():
        if pid in holder:
            raise PartitionQueryError(f"nodes {holder[pid]} and {node} both hold partition-id={pid}")
        holder[pid] = node
    return {node: pid for pid, node in holder.items()}
