"""torch's thread count for a block of work, and the caller's count back after it.

Clients train single-threaded (same seed, same numbers; and Flower's virtual
clients run one thread each). The count is process-wide, so whoever lowers it
for a message or a batch of messages gives the caller's count back at the end.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch

__all__ = ["pinned_threads", "single_threaded"]


@contextmanager
def single_threaded() -> Iterator[None]:
    """torch runs on one thread inside the block; the thread count of before comes back at the end.

    Nothing is changed when the count already is 1 (a Ray actor started with
    one CPU, or an enclosing block).
    """
    threads = torch.get_num_threads()
    if threads == 1:
        yield
        return
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


@contextmanager
def pinned_threads(threads: int) -> Iterator[None]:
    """torch runs on ``threads`` threads inside the block (0: left as it is); the count of before comes back after.

    A run's ``run.threads``: a sweep's cells each pin one thread, in a Ray
    task as in the sweep's own process, so that no cell's torch spreads over
    the cores the other cells run on.
    """
    before = torch.get_num_threads()
    if threads <= 0 or threads == before:
        yield
        return
    torch.set_num_threads(threads)
    try:
        yield
    finally:
        torch.set_num_threads(before)
