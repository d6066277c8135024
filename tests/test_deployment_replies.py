"""The ServerApp's wait for replies in a deployment (term_fl.deployment.replies.ReplyPollingGrid).

Compared with Flower's own wait (``HttpGrid.send_and_receive``, which asks
the SuperLink every 3 s) on a scripted Grid whose replies arrive over
several asks: both return the same replies; the wrapper only asks more often.
"""

from __future__ import annotations

import time
from types import SimpleNamespace

import pytest
from flwr.app import RecordDict
from flwr.serverapp import Grid
from flwr.superlink.grid import http_grid

from term_fl.deployment.replies import DEFAULT_POLL_S, POLL_ENV, ReplyPollingGrid, poll_interval


class ScriptedGrid(Grid):
    """A Grid whose pushed messages get replies at the asks named in ``arrivals`` (message index -> ask)."""

    def __init__(self, arrivals: dict[int, int]) -> None:
        self.arrivals = arrivals
        self.asks = 0
        self.pushed: list[str] = []
        self.replied: set[str] = set()

    def set_run(self, run):  # noqa: ANN001
        self.run_set = run

    @property
    def run(self):  # noqa: ANN201
        return "the run"

    def create_message(self, content, message_type, dst_node_id, group_id, ttl=None):  # noqa: ANN001, ANN201
        return ("message", message_type, dst_node_id, group_id, ttl)

    def get_node_ids(self):  # noqa: ANN201
        return [11, 12]

    def push_messages(self, messages):  # noqa: ANN001, ANN201
        self.pushed = [f"id-{i}" for i, _ in enumerate(messages)]
        return list(self.pushed)

    def pull_messages(self, message_ids):  # noqa: ANN001, ANN201
        self.asks += 1
        wanted = set(message_ids)
        out = []
        for i, mid in enumerate(self.pushed):
            if mid in wanted and mid not in self.replied and self.arrivals.get(i, 10**9) <= self.asks:
                self.replied.add(mid)
                out.append(reply_to(mid, i))
        return out

    def send_and_receive(self, messages, *, timeout=None):  # noqa: ANN001, ANN201
        raise AssertionError("the wrapper must not call the wrapped Grid's own wait")


def reply_to(message_id: str, i: int) -> SimpleNamespace:
    """What both waits read of a reply: the id of the message it answers."""
    return SimpleNamespace(metadata=SimpleNamespace(reply_to_message_id=message_id), i=i)


def order(replies) -> list[int]:  # noqa: ANN001
    return sorted(r.i for r in replies)


def test_same_replies_as_flowers_own_wait(monkeypatch):
    arrivals = {0: 1, 1: 3, 2: 3, 3: 6}
    monkeypatch.setattr(http_grid.time, "sleep", lambda s: None)  # Flower's 3 s between asks, skipped
    flower = http_grid.HttpGrid.send_and_receive(ScriptedGrid(arrivals), [object()] * 4, timeout=60)
    ours = ReplyPollingGrid(ScriptedGrid(arrivals), poll_s=0.001).send_and_receive([object()] * 4, timeout=60)
    assert order(ours) == order(flower) == [0, 1, 2, 3]


def test_asks_every_poll_s_until_every_reply_came():
    grid = ScriptedGrid({0: 2, 1: 5})
    start = time.monotonic()
    replies = ReplyPollingGrid(grid, poll_s=0.05).send_and_receive([object(), object()], timeout=None)
    took = time.monotonic() - start
    assert order(replies) == [0, 1] and grid.asks == 5
    assert 4 * 0.05 <= took < 3.0  # four waits between five asks, far below Flower's 3 s per wait


def test_a_timeout_returns_the_replies_that_came():
    grid = ScriptedGrid({0: 1})  # message 1 never gets a reply
    start = time.monotonic()
    replies = ReplyPollingGrid(grid, poll_s=0.02).send_and_receive([object(), object()], timeout=0.3)
    assert order(replies) == [0]
    assert 0.3 <= time.monotonic() - start < 1.5


def test_everything_else_is_the_wrapped_grids():
    inner = ScriptedGrid({})
    grid = ReplyPollingGrid(inner)
    assert grid.poll_s == DEFAULT_POLL_S
    assert grid.run == "the run" and list(grid.get_node_ids()) == [11, 12]
    assert grid.create_message(RecordDict(), "train", 11, "1", 5.0) == ("message", "train", 11, "1", 5.0)
    grid.set_run("r")
    assert inner.run_set == "r"
    assert list(grid.push_messages([object()])) == ["id-0"]


@pytest.mark.parametrize(("value", "expected"), [("", DEFAULT_POLL_S), ("0.5", 0.5), ("0", None), (" 2 ", 2.0)])
def test_poll_interval_from_the_environment(value, expected):
    assert poll_interval({POLL_ENV: value}) == expected


@pytest.mark.parametrize("value", ["-1", "61", "fast", "nan"])
def test_poll_interval_refuses_what_is_not_seconds(value):
    with pytest.raises(ValueError, match=POLL_ENV):
        poll_interval({POLL_ENV: value})


def test_poll_s_must_be_positive():
    with pytest.raises(ValueError, match="poll_s"):
        ReplyPollingGrid(ScriptedGrid({}), poll_s=0)
