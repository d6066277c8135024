"""Cost of one poll of Flower 1.42's Simulation Engine message dispatcher, without Ray.

Flower's ``vce_api.add_messages_to_queue`` thread hands messages to the
actors: every 0.1 s it calls ``InMemoryLinkState.get_message_ins(node_id,
limit=1)`` for *every* registered node, and each call scans *all* stored
instruction messages (running ``_check_stored_messages`` on each) until it
finds one for that node. One poll therefore costs about
nodes x pending messages checks, under the link state's lock, which the
ServerApp's ``send_and_receive`` also needs. This probe builds the same link
state, grid and node registration as ``flwr.simulation.run_simulation``,
pushes ``pending`` messages and times one poll over the first ``probe_nodes``
nodes (extrapolated linearly to all nodes).
"""

from __future__ import annotations

import time
from typing import Any


def sweep_cost(num_nodes: int, pending: int, probe_nodes: int | None = None) -> dict[str, Any]:
    from flwr.app import ConfigRecord, Message, MessageType, RecordDict
    from flwr.common.constant import SUPERLINK_NODE_ID
    from flwr.proto.task_pb2 import Task  # pylint: disable=E0611
    from flwr.server.superlink.fleet.vce import vce_api
    from flwr.server.superlink.linkstate import LinkStateFactory
    from flwr.server.superlink.linkstate.in_memory_linkstate import RunRecord
    from flwr.simulation.run_simulation import FLWR_IN_MEMORY_DB_NAME
    from flwr.supercore.constant import NOOP_FEDERATION_ID
    from flwr.supercore.object_store import ObjectStoreFactory
    from flwr.supercore.run import Run
    from flwr.supercore.task_identity import TaskIdentity
    from flwr.superlink.federation import NoOpFederationManager
    from flwr.superlink.grid import InMemoryGrid

    factory = LinkStateFactory(FLWR_IN_MEMORY_DB_NAME, NoOpFederationManager(), ObjectStoreFactory())
    state = factory.state()
    run = Run.create_empty(run_id=12345)
    run.primary_task_id = 7
    run.federation_id = NOOP_FEDERATION_ID
    TaskIdentity.task_id, TaskIdentity.run_id, TaskIdentity.node_id = 7, run.run_id, SUPERLINK_NODE_ID
    state.run_ids[run.run_id] = RunRecord(run=run)
    state.task_store[7] = Task(task_id=7, run_id=run.run_id)
    grid = InMemoryGrid(state_factory=factory)
    grid.set_run(run)
    t0 = time.perf_counter()
    mapping = vce_api._register_nodes(num_nodes, factory)  # noqa: SLF001 - what run_simulation does
    register_s = time.perf_counter() - t0
    nodes = list(mapping)
    targets = nodes[:: max(1, num_nodes // pending)][:pending]
    messages = [Message(RecordDict({"config": ConfigRecord({})}), dst_node_id=n, message_type=MessageType.QUERY)
                for n in targets]
    t0 = time.perf_counter()
    grid.push_messages(messages)
    push_s = time.perf_counter() - t0
    # mark them delivered, as after the first poll: later polls scan them all without a match
    for msg in state.message_ins_store.values():
        msg.metadata.delivered_at = "x"
    probe = nodes[: probe_nodes or num_nodes]
    t0 = time.perf_counter()
    for node in probe:
        state.get_message_ins(node_id=node, limit=1)
    probe_s = time.perf_counter() - t0
    return {
        "num_nodes": num_nodes,
        "pending_messages": len(targets),
        "probed_nodes": len(probe),
        "register_nodes_s": register_s,
        "push_s": push_s,
        "one_poll_s": probe_s * num_nodes / len(probe),
        "per_check_us": 1e6 * probe_s / (len(probe) * max(1, len(targets))),
    }


def probe_grid(points: list[tuple[int, int]], budget_s: float = 2.0) -> list[dict[str, Any]]:
    """``sweep_cost`` for each (nodes, pending), probing only as many nodes as fit about ``budget_s``."""
    out = []
    for num_nodes, pending in points:
        first = sweep_cost(num_nodes, pending, probe_nodes=min(num_nodes, 20))
        per_node = first["one_poll_s"] / num_nodes
        probe = int(min(num_nodes, max(20, budget_s / max(per_node, 1e-9))))
        out.append(sweep_cost(num_nodes, pending, probe_nodes=probe))
    return out


if __name__ == "__main__":
    import json

    print(json.dumps(probe_grid([(1_000, 100), (10_000, 100), (1_000, 1_000), (10_000, 10_000)]), indent=1))
