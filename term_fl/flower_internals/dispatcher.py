"""The linear message dispatcher of Flower's Simulation Engine (opt-in patch ``dispatcher``).

Flower 1.42's ``vce_api.add_messages_to_queue`` polls every 0.1 s with one
``LinkState.get_message_ins(node_id, limit=1)`` per registered node, and each
of those scans every stored message: nodes x messages work per poll, under
the state's lock. With 10,000 virtual nodes a round then costs seconds even
when 100 clients are sampled (benchmarks/README.md, 'scale' and
'flower_patches'). The linear dispatcher scans the stored messages once per
poll, under the same lock, runs Flower's own ``_check_stored_messages`` (TTL
and run checks) on the undelivered candidates, and hands out at most one
message per node per poll, as ``limit=1`` does; it polls every 10 ms instead
of every 100 ms. The wait between polls is at least :data:`POLL_S` and at
least ``1 / LOCK_SHARE - 1`` times the last scan, so the scans hold the
state's lock at most ~:data:`LOCK_SHARE` of the time (many thousand stored
messages, e.g. discovery at 10,000 nodes).

Private names: ``vce_api.add_messages_to_queue`` (replaced inside
:func:`linear_dispatcher`), ``InMemoryLinkState.lock``,
``.message_ins_store``, ``._check_stored_messages``.
"""

from __future__ import annotations

import datetime
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from queue import Queue
from typing import Any

from .gate import patch_on, private

__all__ = ["LOCK_SHARE", "POLL_S", "VCE_API", "add_messages_to_queue", "dispatcher_wanted", "linear_dispatcher"]

POLL_S = 0.01
LOCK_SHARE = 0.1
VCE_API = "flwr.server.superlink.fleet.vce.vce_api"


def add_messages_to_queue(state: Any, queue: Queue, nodes_mapping: dict[int, int], f_stop: threading.Event) -> None:
    """Drop-in for ``flwr.server.superlink.fleet.vce.vce_api.add_messages_to_queue``."""
    while not f_stop.is_set():
        batch = []
        with state.lock:
            started = time.perf_counter()  # the scan, not the wait for the lock
            candidates = [
                msg_id
                for msg_id, msg in list(state.message_ins_store.items())
                if msg.metadata.delivered_at == "" and msg.metadata.dst_node_id in nodes_mapping
            ]
            if candidates:
                state._check_stored_messages(set(candidates))  # noqa: SLF001 - Flower's own validity checks
                stamp = datetime.datetime.now(tz=datetime.UTC).isoformat()  # flwr.supercore.date.now().isoformat()
                seen: set[int] = set()
                for msg_id in candidates:
                    msg = state.message_ins_store.get(msg_id)
                    if msg is None or msg.metadata.dst_node_id in seen:
                        continue
                    seen.add(msg.metadata.dst_node_id)
                    msg.metadata.delivered_at = stamp
                    batch.append(msg)
        scan_s = time.perf_counter() - started
        for msg in batch:
            queue.put(msg)
        f_stop.wait(max(POLL_S, scan_s * (1.0 / LOCK_SHARE - 1.0)))


def dispatcher_wanted() -> bool:
    """Whether the linear dispatcher applies: asked for (patch ``dispatcher``) and the fast paths on."""
    return patch_on("dispatcher")


@contextmanager
def linear_dispatcher() -> Iterator[bool]:
    """Use the linear dispatcher inside the block when it is wanted (nested blocks are no-ops); yields whether it is on."""
    vce_api = private(VCE_API) if dispatcher_wanted() else None
    if vce_api is None:
        yield False
        return
    original = vce_api.add_messages_to_queue
    if original is add_messages_to_queue:
        yield True
        return
    vce_api.add_messages_to_queue = add_messages_to_queue  # run_api looks it up at call time
    try:
        yield True
    finally:
        vce_api.add_messages_to_queue = original
