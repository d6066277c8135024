"""Stopping the server loop of Flower's Simulation Engine from the caller's thread.

Flower's Simulation Engine runs the ServerApp in a thread of its own;
:class:`StoppableGrid` wraps its Grid so that every wait of the server loop
ends early once a :class:`Stop` is set (Ctrl-C, an engine that failed), and
pulls replies every 10 ms without starving the threads that deliver them.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable
from typing import Any

from flwr.app import Message
from flwr.serverapp import Grid

from term_fl.flower_internals.dispatcher import LOCK_SHARE  # the same share of the link state's lock

__all__ = ["Stop", "StoppableGrid"]


class Stop:
    """Set once, from the caller's thread: the server loop raises ``error`` at its next wait."""

    def __init__(self) -> None:
        self._event = threading.Event()
        self.error: BaseException = KeyboardInterrupt("the simulation was stopped")

    def set(self, error: BaseException | None = None) -> None:  # noqa: D102
        if error is not None:
            self.error = error
        self._event.set()

    def is_set(self) -> bool:  # noqa: D102
        return self._event.is_set()


class StoppableGrid(Grid):
    """Flower's Grid, with every wait of the server loop ending early once ``stop`` is set.

    Flower's Simulation Engine runs the ServerApp in a thread of its own. On
    Ctrl-C the main thread stops the engine, but the server loop would sit in
    ``send_and_receive`` until ``run.round_timeout`` and then go on with
    failed rounds; when the engine itself fails, it would wait out
    ``run.node_timeout`` for nodes that never come. With this wrapper it
    raises the stop's error (``KeyboardInterrupt`` for Ctrl-C, so that
    ``run_federation`` records the run as interrupted; the engine's error,
    recorded as failed) within a poll interval, and the thread ends.

    Replies are pulled every ``poll_s`` (10 ms; Flower's grid: 100 ms), and
    never more often than keeps the pulls under ~10% of the time: one pull
    scans every pending message under the link state's lock, holding the
    GIL, so 10,000 pending messages (asking 10,000 nodes for their
    partitions) pulled every 10 ms starve the threads that deliver them.
    Everything else is delegated.
    """

    def __init__(self, grid: Grid, stop: Stop, poll_s: float = 0.01) -> None:
        self._grid = grid
        self._stop = stop
        self._poll_s = poll_s

    def _check(self) -> None:
        if self._stop.is_set():
            raise self._stop.error

    def set_run(self, run: Any) -> None:  # noqa: D102
        self._grid.set_run(run)

    @property
    def run(self) -> Any:  # noqa: D102
        return self._grid.run

    def create_message(self, *args: Any, **kwargs: Any) -> Message:  # noqa: D102
        return self._grid.create_message(*args, **kwargs)

    def get_node_ids(self) -> Iterable[int]:  # noqa: D102
        self._check()
        return self._grid.get_node_ids()

    def push_messages(self, messages: Iterable[Message]) -> Iterable[str]:  # noqa: D102
        self._check()
        return self._grid.push_messages(messages)

    def pull_messages(self, message_ids: Iterable[str]) -> Iterable[Message]:  # noqa: D102
        return self._grid.pull_messages(message_ids)

    def send_and_receive(self, messages: Iterable[Message], *, timeout: float | None = None) -> Iterable[Message]:
        """Flower's ``send_and_receive`` (push, then pull until every reply or the timeout), stoppable."""
        pending = set(self.push_messages(messages))
        end = None if timeout is None else time.monotonic() + timeout
        replies: list[Message] = []
        while pending:
            self._check()
            started = time.perf_counter()
            received = list(self.pull_messages(pending))
            pull_s = time.perf_counter() - started
            replies.extend(received)
            pending.difference_update(m.metadata.reply_to_message_id for m in received)
            if not pending or (end is not None and time.monotonic() >= end):
                break
            time.sleep(max(self._poll_s, pull_s * (1.0 / LOCK_SHARE - 1.0)))
        return replies
