"""A linear-time message dispatcher for Flower 1.42's Simulation Engine.

Flower 1.42's ``vce_api.add_messages_to_queue`` polls every 0.1 s with one
``LinkState.get_message_ins(node_id, limit=1)`` per registered node, and each
of those scans every stored message: nodes x messages work per poll, under
the state's lock. With 10,000 virtual nodes a round then costs seconds even
when 100 clients are sampled (benchmarks/README.md, 'scale').

This dispatcher scans the stored messages once per poll, under the same
lock, runs Flower's own ``_check_stored_messages`` (TTL and run checks) on
the undelivered candidates, and hands out at most one message per node per
poll, as ``limit=1`` does; it polls every 10 ms instead of every 100 ms. It
is installed only for the Flower versions it was written against
(``SUPPORTED``), only while a simulation runs, and ``TERM_FL_DISPATCHER=flower``
keeps Flower's own dispatcher.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from queue import Queue
from typing import Any

SUPPORTED = ("1.42.",)
ENV = "TERM_FL_DISPATCHER"
# Flower polls every 0.1 s, which adds up to 0.1 s to every train and every
# evaluate phase; one poll here is one scan of the stored messages. The wait
# between polls is at least POLL_S and at least LOCK_SHARE^-1 - 1 times the
# last scan, so the scans hold the state's lock at most ~LOCK_SHARE of the time
# (many thousand stored messages, e.g. discovery at 10,000 nodes).
POLL_S = 0.01
LOCK_SHARE = 0.1


def add_messages_to_queue(state: Any, queue: Queue, nodes_mapping: dict[int, int], f_stop: threading.Event) -> None:
    """Drop-in for ``flwr.server.superlink.fleet.vce.vce_api.add_messages_to_queue``."""
    from flwr.supercore.date import now

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
                stamp = now().isoformat()
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


def wanted() -> bool:
    """Whether the linear dispatcher applies to the installed Flower and is not turned off."""
    import flwr

    return os.environ.get(ENV, "linear") != "flower" and flwr.__version__.startswith(SUPPORTED)


@contextmanager
def linear_dispatcher() -> Iterator[bool]:
    """Use the linear dispatcher inside the block (nested blocks are no-ops); yields whether it is on."""
    from flwr.server.superlink.fleet.vce import vce_api

    original = vce_api.add_messages_to_queue
    if original is add_messages_to_queue or not wanted():
        yield original is add_messages_to_queue
        return
    vce_api.add_messages_to_queue = add_messages_to_queue  # run_api looks it up at call time
    try:
        yield True
    finally:
        vce_api.add_messages_to_queue = original
