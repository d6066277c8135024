"""Layer 6, the command line: ``term-fl run | sweep | runs | dashboard | report``.

:mod:`.commands` (arguments, commands, exit statuses), :mod:`.sweep` (a grid of
runs, resumable, and its comparison files), :mod:`.console` (headers,
progress, tables, logs).
"""

from term_fl.cli.commands import entry, main

__all__ = ["entry", "main"]
