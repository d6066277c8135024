"""A Grid that forwards to another Grid and records when each send_and_receive ran.

Wrapping the Grid a ServerApp receives times rounds without touching the
server loop or the strategy: every ``send_and_receive`` call is logged with
its message type (train / evaluate / query), number of messages and replies,
start and end (``time.perf_counter``) and the process's CPU time during it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from flwr.app import Message, RecordDict
from flwr.serverapp import Grid


@dataclass
class Call:
    kind: str
    messages: int
    replies: int
    start: float
    end: float
    cpu_s: float = 0.0  # this process's CPU time during the call (time.process_time)

    @property
    def duration(self) -> float:
        return self.end - self.start


class TimingGrid(Grid):
    """Forwards every Grid method to ``inner``; logs ``send_and_receive`` calls in ``calls``."""

    def __init__(self, inner: Grid, on_call: Callable[[Call], None] | None = None) -> None:
        self._inner = inner
        self.calls: list[Call] = []
        self._on_call = on_call

    def set_run(self, run):  # noqa: ANN001, D102
        return self._inner.set_run(run)

    @property
    def run(self):  # noqa: D102
        return self._inner.run

    def create_message(self, content: RecordDict, message_type: str, dst_node_id: int, group_id: str,  # noqa: D102
                       ttl: float | None = None) -> Message:
        return self._inner.create_message(content, message_type, dst_node_id, group_id, ttl)

    def get_node_ids(self) -> Iterable[int]:  # noqa: D102
        return self._inner.get_node_ids()

    def push_messages(self, messages: Iterable[Message]) -> Iterable[str]:  # noqa: D102
        return self._inner.push_messages(messages)

    def pull_messages(self, message_ids: Iterable[str]) -> Iterable[Message]:  # noqa: D102
        return self._inner.pull_messages(message_ids)

    def send_and_receive(self, messages: Iterable[Message], *, timeout: float | None = None) -> Iterable[Message]:  # noqa: D102
        messages = list(messages)
        kind = messages[0].metadata.message_type if messages else "none"
        # The CPU clock is read outside the wall-clock window: reading it sums every thread's time and can
        # take milliseconds on a loaded machine (measured: 0.2-3 ms here), which would count as client time.
        cpu = time.process_time()
        start = time.perf_counter()
        replies = list(self._inner.send_and_receive(messages, timeout=timeout))
        end = time.perf_counter()
        call = Call(kind, len(messages), len(replies), start, end, time.process_time() - cpu)
        self.calls.append(call)
        if self._on_call is not None:
            self._on_call(call)
        return replies

    def round_durations(self, end: float, kind: str = "train") -> list[float]:
        """Time from each training call to the next (the last one to ``end``): one value per round."""
        starts = [c.start for c in self.calls if c.kind == kind]
        return [b - a for a, b in zip(starts, [*starts[1:], end])]
