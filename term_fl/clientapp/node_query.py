"""The answer to the server's node-discovery query: which partition this node holds.

Kept apart from :mod:`term_fl.clientapp.app` so that answering it imports only
Flower: in the Deployment Engine every message is a fresh ClientApp process,
and a query needs neither torch nor the data nor the scenario.
"""

from __future__ import annotations

from flwr.app import Context, Message, MetricRecord, RecordDict

from term_fl.common.keys import METRICS, NUM_PARTITIONS, PARTITION_ID


def partition_reply(msg: Message, context: Context) -> Message:
    """Reply with this node's ``partition-id`` and ``num-partitions`` (-1 and 0 when not configured)."""
    pid = int(context.node_config.get(PARTITION_ID, -1))
    num = int(context.node_config.get(NUM_PARTITIONS, 0))
    return Message(RecordDict({METRICS: MetricRecord({PARTITION_ID: pid, NUM_PARTITIONS: num})}), reply_to=msg)
