"""torch's thread count for a block of work, and the caller's count back after it.

Clients train single-threaded (same seed, same numbers; and Flower's virtual
clients run one thread each). The count is process-wide, so whoever lowers it
for a message or a batch of messages gives the caller's count back at the end.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch

__all__ = ["single_threaded"]


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
