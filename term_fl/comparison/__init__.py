"""Layer 1, comparison: runs over seeds, paired differences, selection on validation, cells, convergence.

Pure functions over run summaries and plain values (no store, no I/O):
:mod:`.table` (the one source of comparison numbers: statistics over seeds,
paired differences against every baseline, tests, Holm, marks),
:mod:`.paired` (mean ± SE, the paired t-test, the sign-flip test, Holm),
:mod:`.pairing` (which cells pair with which baselines), :mod:`.summaries`
(a sweep's rows and the tuned parameter chosen on validation), :mod:`.cells`
(the dashboard's cells: which runs count, labels, curves),
:mod:`.convergence` (readings of a run's per-round curve).

Until term-fl 0.3 this package was one module, ``term_fl.comparison``; its
names are still reachable here, with a DeprecationWarning, for one release.
"""

from __future__ import annotations

import importlib
from typing import Any


_SUBMODULES = ("cells", "convergence", "paired", "pairing", "summaries", "table")


def __getattr__(name: str) -> Any:
    if name.startswith("__") or name in _SUBMODULES:  # the import system then loads the submodule
        raise AttributeError(f"module 'term_fl.comparison' has no attribute {name!r}")
    from term_fl import _moved

    summaries = importlib.import_module("term_fl.comparison.summaries")
    if not hasattr(summaries, name):
        raise AttributeError(f"module 'term_fl.comparison' has no attribute {name!r}")
    _moved.moved_warning(f"term_fl.comparison.{name}", f"term_fl.comparison.summaries.{name}")
    return getattr(summaries, name)
