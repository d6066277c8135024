"""What the results store raises."""

from __future__ import annotations


class StoreError(Exception):
    """The results store cannot do what was asked (missing file, wrong schema, finished run ...)."""


class RunNotFound(StoreError, KeyError):
    """No run with this run_id in the store."""

    def __str__(self) -> str:  # KeyError would print the message in quotes
        return str(self.args[0])


class DuplicateRoundError(StoreError):
    """This round of this run is already recorded."""
