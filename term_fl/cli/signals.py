"""The signals that stop a command: SIGINT (Ctrl-C), SIGTERM and SIGHUP, each ending a run as ``interrupted``.

Python turns SIGINT into ``KeyboardInterrupt`` in the main thread; SIGTERM
(what ``kill``, ``timeout``, ``docker stop``, systemd and CI send) and SIGHUP
(a closed terminal) would end the process at once, leaving a run ``running``
in the results store. Inside :func:`stop_signals_interrupt` they raise
:class:`~term_fl.common.errors.Interrupted`, a ``KeyboardInterrupt``, so every
engine stops as it does on Ctrl-C and records the run as interrupted; the
command exits with ``128 + signal`` (130, 143, 129), as a shell reports a
program a signal ended.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

from term_fl.common.errors import Interrupted

__all__ = ["STOP_SIGNALS", "exit_status", "stop_signals_interrupt"]

STOP_SIGNALS = (signal.SIGTERM, signal.SIGHUP)
"""The signals turned into :class:`Interrupted` (SIGINT already is a ``KeyboardInterrupt``)."""


@contextmanager
def stop_signals_interrupt() -> Iterator[None]:
    """Inside the block, SIGTERM and SIGHUP raise :class:`Interrupted` in the main thread; the handlers of before
    come back at its end.

    Only the first signal raises: later ones, while the run is being recorded
    as interrupted and its engine stopped, are ignored (SIGKILL still ends the
    process, and the run's watchdog then ends what it started). Off the main
    thread, where Python cannot set handlers, the block changes nothing.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    received: list[int] = []

    def interrupt(signum: int, frame: FrameType | None) -> None:
        if received:
            return
        received.append(signum)
        raise Interrupted(signum)

    previous = {sig: signal.signal(sig, interrupt) for sig in STOP_SIGNALS}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def exit_status(interrupt: KeyboardInterrupt) -> int:
    """The exit status after ``interrupt``: ``128 + signal`` (Ctrl-C: 130)."""
    return interrupt.exit_status if isinstance(interrupt, Interrupted) else 128 + signal.SIGINT
