"""Errors that the command line reports as one message, defined where importing them costs nothing.

:class:`ConfigError`: a scenario, override, sweep value or command-line
value is invalid; the message names the key (raised by :mod:`term_fl.config`,
which re-exports it).

:class:`EngineStartError`: an engine could not start (Ray, the resources it
offers) before the run began, so nothing was recorded. Its message names the
cause and a next step, e.g. "Ray could not start: <reason>. Try --engine
inprocess."; ``term-fl`` prints it alone and exits with status 2.
"""

from __future__ import annotations


class EngineStartError(RuntimeError):
    """An engine could not start; the message names the cause and the next step."""


class ConfigError(ValueError):
    """A scenario, override or sweep value is invalid; the message names the key."""
