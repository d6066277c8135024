"""The module names of term-fl 0.2, kept importable for one release.

term-fl 0.3 regrouped the flat top level into layer packages (see
docs/architecture.md). ``import term_fl.tilting`` (and every other old name
below) still works: it warns once with :class:`DeprecationWarning` and
gives the module under its new name, the same module object. The old names
go in term-fl 0.4.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import warnings
from types import ModuleType

REMOVED_IN = "0.4"

MOVED: dict[str, str] = {
    "term_fl.arrays": "term_fl.common.arrays",
    "term_fl.errors": "term_fl.common.errors",
    "term_fl.extras": "term_fl.common.extras",
    "term_fl.jsonable": "term_fl.common.jsonable",
    "term_fl.keys": "term_fl.common.keys",
    "term_fl.seeding": "term_fl.common.seeding",
    "term_fl.tilting": "term_fl.maths.tilting",
    "term_fl.fairness": "term_fl.maths.fairness",
    "term_fl.risks": "term_fl.maths.risks",
    "term_fl.robust": "term_fl.maths.robust",
    "term_fl.models": "term_fl.learning.models",
    "term_fl.training": "term_fl.learning.training",
    "term_fl.cohort": "term_fl.learning.cohort_training",
    "term_fl.comparison_cells": "term_fl.comparison.cells",
    "term_fl.convergence": "term_fl.comparison.convergence",
    "term_fl.client": "term_fl.plugin.losses",
    "term_fl.client_app": "term_fl.clientapp.app",
    "term_fl.node_query": "term_fl.clientapp.node_query",
    "term_fl.engines.client_cache": "term_fl.clientapp.cache",
    "term_fl.engines.cohort": "term_fl.engines.cohort_executor",
    "term_fl.sweep": "term_fl.cli.sweep",
    "term_fl.console": "term_fl.cli.console",
}
"""Old module name -> new module name."""


def moved_warning(old: str, new: str) -> None:
    """Warn that ``old`` is a deprecated name of ``new``."""
    warnings.warn(
        f"{old} moved to {new} in term-fl 0.3; import it from there (the old name goes in term-fl {REMOVED_IN})",
        DeprecationWarning,
        stacklevel=3,
    )


class _MovedFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds an old module name and loads it as the module under its new name."""

    def find_spec(self, fullname: str, path: object = None, target: object = None) -> importlib.machinery.ModuleSpec | None:
        if fullname not in MOVED:
            return None
        return importlib.util.spec_from_loader(fullname, self)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> None:
        return None  # a placeholder; exec_module puts the real module in its place

    def exec_module(self, module: ModuleType) -> None:
        old = module.__name__
        moved_warning(old, MOVED[old])
        # The import system returns whatever sys.modules holds for the name once this returns.
        sys.modules[old] = importlib.import_module(MOVED[old])


def install() -> None:
    """Make the old names importable (idempotent)."""
    if not any(isinstance(finder, _MovedFinder) for finder in sys.meta_path):
        sys.meta_path.append(_MovedFinder())
