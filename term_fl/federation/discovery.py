"""Node discovery: which node holds which partition, learnt once before round 1 and kept up to date.

Flower gives nodes random ids per run, so the server first maps node ids to
partition ids (:func:`discover_nodes`): it waits, with a deadline, until the
expected number of nodes is connected, then takes the engine's own table
when it has one and asks every node otherwise (a ``QUERY`` message whose
reply carries ``partition-id`` and ``num-partitions``). Every later round,
:func:`rejoin_nodes` lets a SuperNode that restarted under a new node id
take its partition back. docs/contracts.md, "Node discovery", states the
contract.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence

from flwr.app import ConfigRecord, Message, MessageType, RecordDict
from flwr.serverapp import Grid

from term_fl.common.keys import CONFIG, NUM_PARTITIONS, PARTITION_ID
from term_fl.federation.records import FederationError
from term_fl.strategies.replies import metrics_of

__all__ = ["QUERY_TRIES", "NodePartitions", "discover_nodes", "query_partitions", "rejoin_nodes"]

log = logging.getLogger("term_fl")

NodePartitions = Callable[[float], Mapping[int, int] | None]
"""How an engine that placed the partitions itself tells which node holds which: called with the
seconds left, it returns ``{node_id: partition_id}``, or None when it cannot tell (then every node is asked)."""

QUERY_TRIES = 3  # a node whose partition query failed is asked at most this often in one discovery


def discover_nodes(
    grid: Grid,
    expected: int,
    timeout: float,
    poll_s: float = 0.2,
    known: NodePartitions | None = None,
    settle_s: float | None = None,
) -> dict[int, int]:
    """Map node ids to partition ids, waiting up to ``timeout`` s for ``expected`` nodes.

    Every node is asked for its partition-id (one query message each; a node
    whose query failed is asked again, ``QUERY_TRIES`` in all), unless
    ``known`` gives a table that covers exactly the connected nodes and
    partitions ``0..expected-1``: Flower's Simulation Engine builds that table
    when it creates its virtual nodes, and asking 10,000 of them costs 10,000
    round trips through Ray (benchmarks/README.md, 'discovery').

    ``settle_s`` is for engines that register all their nodes at once
    (Flower's Simulation Engine under ``flwr run``): once some nodes are
    connected and their number has not changed for ``settle_s`` seconds,
    fewer than ``expected`` is an error right away instead of after ``timeout``.

    Raises
    ------
    FederationError
        When fewer than ``expected`` nodes connect or answer in time, two
        nodes hold the same partition, or a node's partition does not fit
        the dataset.
    """
    start = time.monotonic()
    deadline = start + timeout
    # Wait until the expected number of nodes is connected
    node_ids = _wait_for_nodes(grid, expected, timeout, deadline, poll_s, settle_s)
    # The engine's own table, when it matches the connected nodes
    if known is not None:
        table = known(max(0.0, deadline - time.monotonic()))
        if table is not None and set(table) == set(node_ids) and sorted(table.values()) == list(range(expected)):
            return dict(table)
        log.info("the engine's node table does not match the connected nodes: asking every node")
    # Else ask every node, and check that every partition answered
    mapping = _ask_nodes(grid, node_ids, expected, deadline, poll_s)
    if len(mapping) < expected:
        missing = sorted(set(range(expected)) - set(mapping.values()))
        raise FederationError(
            f"{len(mapping)} of {expected} partitions answered the discovery query within {timeout:g} s; "
            f"missing partition ids: {missing[:20]}{' ...' if len(missing) > 20 else ''}"
        )
    return mapping


def _wait_for_nodes(
    grid: Grid, expected: int, timeout: float, deadline: float, poll_s: float, settle_s: float | None
) -> list[int]:
    """The sorted connected node ids once there are ``expected`` of them; FederationError at the deadline.

    With ``settle_s``, a number of nodes (above 0) that has not changed for
    that long is final: fewer than ``expected`` is an error at once.
    """
    count, changed = -1, time.monotonic()
    while len(node_ids := sorted(grid.get_node_ids())) < expected:
        now = time.monotonic()
        if len(node_ids) != count:
            count, changed = len(node_ids), now
        if settle_s is not None and count > 0 and now - changed >= settle_s:
            raise FederationError(
                f"the simulation has {count} virtual SuperNodes but the scenario has {expected} devices: "
                f"run it with num-supernodes={expected}, e.g. "
                f'flwr run . local --federation-config "num-supernodes={expected}"'
            )
        if now > deadline:
            raise FederationError(
                f"only {len(node_ids)} of {expected} expected nodes connected within {timeout:g} s "
                "(run.node_timeout); start one SuperNode per partition, or raise run.node_timeout"
            )
        time.sleep(poll_s)
    return node_ids


def _wait_for_any_node(grid: Grid, timeout: float, poll_s: float) -> set[int]:
    """The connected nodes once there is one; FederationError after ``timeout`` s without any."""
    log.warning("no node is connected any more: waiting up to %g s (run.node_timeout) for nodes to come back", timeout)
    deadline = time.monotonic() + timeout
    while not (online := set(grid.get_node_ids())):
        if time.monotonic() > deadline:
            raise FederationError(f"no node connected for {timeout:g} s (run.node_timeout): every SuperNode is gone")
        time.sleep(poll_s)
    return online


def _ask_nodes(grid: Grid, node_ids: list[int], expected: int, deadline: float, poll_s: float) -> dict[int, int]:
    """Ask the nodes for their partition, the ones whose query failed again (``QUERY_TRIES`` in all)."""
    mapping: dict[int, int] = {}
    asking, tries = node_ids, 0
    while asking:
        tries += 1
        # One query message per node still to ask; a partition may have one node only
        for node, pid in query_partitions(grid, asking, expected, max(1.0, deadline - time.monotonic())):
            if pid in mapping.values():
                other = next(n for n, p in mapping.items() if p == pid)
                raise FederationError(
                    f"nodes {other} and {node} both hold partition-id={pid}; "
                    "give every SuperNode a distinct partition-id"
                )
            mapping[node] = pid
        # A query that failed (an error reply: Flower answers "ClientApp crashed" when a ClientApp
        # process misses its task-token or heartbeat window on an overloaded host) is asked again
        # (QUERY_TRIES in all) while run.node_timeout lasts, the still-connected nodes only.
        online = set(grid.get_node_ids())
        asking = [n for n in asking if n not in mapping and n in online]
        if asking and tries < QUERY_TRIES and time.monotonic() < deadline - 1.0:
            log.warning("asking %d node(s) again for their partition: %s", len(asking), asking[:20])
            time.sleep(min(poll_s * 5, 1.0))
        else:
            break
    return mapping


def query_partitions(grid: Grid, node_ids: Sequence[int], expected: int, timeout: float) -> list[tuple[int, int]]:
    """Ask nodes which partition they hold: (node id, partition id) of every valid answer.

    A failed or empty answer is logged and left out (the caller may ask
    again); a partition outside ``0..expected-1``, or a node that counts
    another number of partitions, is a :class:`FederationError`.
    """
    messages = [
        Message(RecordDict({CONFIG: ConfigRecord({})}), dst_node_id=node_id, message_type=MessageType.QUERY)
        for node_id in node_ids
    ]
    answers = []
    for reply in grid.send_and_receive(messages, timeout=timeout):
        metrics = metrics_of(reply)
        if metrics is None or PARTITION_ID not in metrics or NUM_PARTITIONS not in metrics:
            reason = reply.error.reason if reply.has_error() else "the reply holds no partition-id and num-partitions"
            log.warning("node %s failed the partition query: %s", reply.metadata.src_node_id, reason)
            continue
        pid = int(metrics[PARTITION_ID])
        num = int(metrics[NUM_PARTITIONS])
        if num != expected or not 0 <= pid < expected:
            raise FederationError(
                f"node {reply.metadata.src_node_id} holds partition-id={pid} of num-partitions={num}, "
                f"but the scenario's dataset has {expected} devices (partition ids 0..{expected - 1})"
            )
        answers.append((reply.metadata.src_node_id, pid))
    return answers


def rejoin_nodes(
    grid: Grid, node_partitions: dict[int, int], expected: int, timeout: float, *, wait_s: float | None = None,
    poll_s: float = 0.2,
) -> dict[int, int]:
    """Map nodes that connected after discovery: a restarted SuperNode takes its partition back.

    A SuperNode that crashed and was started again (compose: ``restart:
    on-failure``) registers under a new node id. Flower's node liveness
    drops the old id from ``grid.get_node_ids()`` once it misses its
    heartbeats (about 60 s in Flower 1.42), and the strategies sample only
    connected nodes. A new id is asked for its partition; it takes the
    partition over when the partition's node is no longer connected (while
    that node is still connected, the newcomer is ignored with a warning).
    Engines whose nodes never change pay one ``get_node_ids()`` per round,
    and get ``node_partitions`` itself back.

    With ``wait_s``, a federation left without any connected node waits up
    to that long for nodes to come back (a :class:`FederationError` after
    it): every SuperNode gone at once is a deployment that restarts them, or
    that stops (``docker compose stop`` ends the SuperNodes before the
    SuperLink, whose ServerApp is then interrupted), not a run whose rounds
    fail one after the other for want of nodes.
    """
    online = set(grid.get_node_ids())
    if not online and wait_s is not None:
        online = _wait_for_any_node(grid, wait_s, poll_s)
    newcomers = sorted(online - set(node_partitions))
    if not newcomers:
        return node_partitions
    mapping = dict(node_partitions)
    node_of = {pid: node for node, pid in mapping.items()}
    for node, pid in query_partitions(grid, newcomers, expected, timeout):
        old = node_of.get(pid)
        if old is not None and old in online:
            log.warning("node %s also holds partition-id=%d, which node %s still serves: ignored", node, pid, old)
            continue
        mapping.pop(old, None)
        mapping[node] = node_of[pid] = pid
        log.warning("partition %d is back: node %s replaces node %s", pid, node, old)
    return mapping
