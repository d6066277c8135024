"""The ServerApp's wait for replies in a deployment, polled every fraction of a second.

Flower 1.42's deployment Grid (``flwr.superlink.grid.http_grid``) pushes a
phase's messages and then asks the SuperLink for replies every 3 s, so every
phase of a round ends on a multiple of 3 s after it started, however early
the last reply came. :class:`ReplyPollingGrid` wraps any Grid and waits for
the same replies with a shorter interval; everything else goes to the
wrapped Grid unchanged. Which replies a phase gets, and so every number, does
not depend on when they are asked for: the server loop orders them by
partition (docs/contracts.md).
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable
from typing import TYPE_CHECKING

from flwr.app import Message, RecordDict
from flwr.serverapp import Grid

if TYPE_CHECKING:  # the types in Grid's own signatures
    from flwr.proto.node_pb2 import NodeInfo  # pylint: disable=E0611
    from flwr.supercore.run import Run

POLL_ENV = "TERM_FL_REPLY_POLL_S"
DEFAULT_POLL_S = 0.2
MAX_POLL_S = 60.0


def poll_interval(environ: dict[str, str] | None = None) -> float | None:
    """Seconds between two asks for replies: ``$TERM_FL_REPLY_POLL_S`` (default 0.2); None for ``0`` (Flower's own wait).

    Raises
    ------
    ValueError
        When the variable is not a number of seconds in [0, 60].
    """
    text = (os.environ if environ is None else environ).get(POLL_ENV, "").strip()
    if not text:
        return DEFAULT_POLL_S
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not 0.0 <= value <= MAX_POLL_S:
        raise ValueError(f"{POLL_ENV}={text!r}: give seconds between asks for replies, 0 to {MAX_POLL_S:g} "
                         "(0: Flower's own wait, every 3 s)")
    return value or None


class ReplyPollingGrid(Grid):
    """A Grid whose ``send_and_receive`` asks for replies every ``poll_s`` seconds; the rest is ``grid``'s.

    Parameters
    ----------
    grid
        The Grid Flower gave the ServerApp.
    poll_s
        Seconds between two asks for the replies still missing.
    """

    def __init__(self, grid: Grid, poll_s: float = DEFAULT_POLL_S) -> None:
        if not poll_s > 0:
            raise ValueError(f"poll_s must be > 0 seconds, got {poll_s}")
        self.grid = grid
        self.poll_s = poll_s

    def set_run(self, run: Run) -> None:
        self.grid.set_run(run)

    @property
    def run(self) -> Run:
        return self.grid.run

    def create_message(  # noqa: PLR0913 (Flower's signature)
        self, content: RecordDict, message_type: str, dst_node_id: int, group_id: str, ttl: float | None = None
    ) -> Message:
        return self.grid.create_message(content, message_type, dst_node_id, group_id, ttl)

    def get_node_ids(self) -> Iterable[int]:
        return self.grid.get_node_ids()

    def get_nodes(self) -> Iterable[NodeInfo]:
        return self.grid.get_nodes()

    def push_messages(self, messages: Iterable[Message]) -> Iterable[str]:
        return self.grid.push_messages(messages)

    def pull_messages(self, message_ids: Iterable[str]) -> Iterable[Message]:
        return self.grid.pull_messages(message_ids)

    def send_and_receive(self, messages: Iterable[Message], *, timeout: float | None = None) -> Iterable[Message]:
        """Push ``messages``, then ask for their replies every ``poll_s`` until all came or ``timeout`` passed."""
        missing = set(self.grid.push_messages(messages))
        end = None if timeout is None else time.monotonic() + timeout
        replies: list[Message] = []
        while missing:
            got = list(self.grid.pull_messages(missing))
            replies.extend(got)
            missing.difference_update(m.metadata.reply_to_message_id for m in got)
            if not missing or (end is not None and time.monotonic() >= end):
                break
            time.sleep(self.poll_s if end is None else max(0.0, min(self.poll_s, end - time.monotonic())))
        return replies
