"""Errors that the command line reports as one message, defined where importing them costs nothing.

:class:`ConfigError`: a scenario, override, sweep value or command-line
value is invalid; the message names the key (raised by :mod:`term_fl.config`,
which re-exports it).

:class:`EngineStartError`: an engine could not start (Ray, the resources it
offers) before the run began, so nothing was recorded. Its message names the
cause and a next step, e.g. "Ray could not start: <reason>. Try --engine
inprocess."; ``term-fl`` prints it alone and exits with status 2.

:class:`Interrupted`: a signal that asks a process to stop (SIGTERM, SIGHUP),
raised in the main thread as Ctrl-C raises ``KeyboardInterrupt`` (it is one),
so a run is recorded as interrupted whichever signal stopped it.
"""

from __future__ import annotations

import signal


class EngineStartError(RuntimeError):
    """An engine could not start; the message names the cause and the next step."""


class ConfigError(ValueError):
    """A scenario, override or sweep value is invalid; the message names the key."""


class Interrupted(KeyboardInterrupt):
    """A signal asked the process to stop; handled as Ctrl-C. ``exit_status`` is the shell's ``128 + signal``."""

    def __init__(self, signum: int) -> None:
        super().__init__(int(signum))
        self.signum = int(signum)

    def __str__(self) -> str:
        return f"interrupted by {signal.Signals(self.signum).name}"

    @property
    def exit_status(self) -> int:
        """128 + the signal's number: 143 for SIGTERM, 129 for SIGHUP (130 is Ctrl-C's)."""
        return 128 + self.signum
