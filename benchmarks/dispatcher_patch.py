"""A linear-time replacement for Flower 1.42's Simulation Engine dispatcher (benchmark only).

Flower's ``vce_api.add_messages_to_queue`` polls every 0.1 s with one
``InMemoryLinkState.get_message_ins(node_id, limit=1)`` per registered node,
each scanning every stored message: nodes x messages work per poll (see
:mod:`benchmarks.linkstate_probe`). This version scans the stored messages
once per poll, under the state's lock, and hands out at most one undelivered
message per node per poll (as ``limit=1`` does), running Flower's own
``_check_stored_messages`` (TTL and federation checks) on the candidates.
``install()`` swaps it in for the current process; the scale benchmark uses it
to show what 10,000 clients cost without the quadratic poll. It is a proposal
for term_fl/engines/flower.py, not part of term-fl.
"""

from __future__ import annotations

import threading
from queue import Queue
from typing import Any


def add_messages_to_queue(state: Any, queue: Queue, nodes_mapping: dict[int, int], f_stop: threading.Event) -> None:
    from flwr.supercore.date import now

    while not f_stop.is_set():
        batch = []
        with state.lock:
            candidates = [
                msg_id
                for msg_id, msg in list(state.message_ins_store.items())
                if msg.metadata.delivered_at == "" and msg.metadata.dst_node_id in nodes_mapping
            ]
            if candidates:
                state._check_stored_messages(set(candidates))  # noqa: SLF001 - Flower's own validity checks
                stamp = now().isoformat()
                seen: set[int] = set()
                for msg_id in candidates:
                    msg = state.message_ins_store.get(msg_id)
                    if msg is None or msg.metadata.dst_node_id in seen:
                        continue
                    seen.add(msg.metadata.dst_node_id)
                    msg.metadata.delivered_at = stamp
                    batch.append(msg)
        for msg in batch:
            queue.put(msg)
        f_stop.wait(0.1)


def install() -> None:
    """Use the linear dispatcher in this process (``run_api`` looks the function up at call time)."""
    from flwr.server.superlink.fleet.vce import vce_api

    vce_api.add_messages_to_queue = add_messages_to_queue
