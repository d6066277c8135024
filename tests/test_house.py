"""The house rules docs/architecture.md states, kept by a test so later work keeps them.

- every module of term_fl/ has at most 450 lines;
- each layer imports only its own layer and the layers below it (every
  import counted, also those inside functions), apart from the two reads of
  the strategy registry that the document names;
- only the layers from runs/ up import comparison/.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "term_fl"
MAX_LINES = 450
LAYERS = {
    "common": 0,
    "maths": 1, "comparison": 1, "data": 1, "learning": 1,
    "config": 2, "results": 2,
    "strategies": 3, "clientapp": 3, "plugin": 3, "flower_internals": 3,
    "federation": 4,
    "runs": 5, "engines": 5,
    "cli": 6, "dashboard": 6, "deployment": 6,
}  # fmt: skip
"""Each package of term_fl/ and its layer, as docs/architecture.md draws them."""
UPWARD_ALLOWED = {("config", "strategies"), ("comparison", "strategies")}
"""The registry's names read from below (the [strategy] schema; cell labels and baselines)."""
MODULES = sorted(p for p in PACKAGE.rglob("*.py") if ".venv" not in p.parts)


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imported(path: Path, text: str | None = None) -> set[str]:
    """Every module name ``path`` imports (``text``: its source, if not the file's), relative imports resolved,
    those inside functions included."""
    name, names = _module_name(path), set()
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    for node in ast.walk(ast.parse(path.read_text() if text is None else text)):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            names.add(".".join(base + ([node.module] if node.module else [])))
    return names


def _package(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if parts[0] == "term_fl" and len(parts) > 1 and parts[1] in LAYERS else None


def test_the_layer_table_covers_every_package():
    packages = {p.name for p in PACKAGE.iterdir() if p.is_dir() and (p / "__init__.py").is_file()}
    assert packages == set(LAYERS), "a new package needs its layer here and in docs/architecture.md"


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_every_module_has_at_most_450_lines(path):
    lines = len(path.read_text().splitlines())
    assert lines <= MAX_LINES, f"{path.relative_to(PACKAGE)} has {lines} lines: split it by purpose"


def test_no_layer_imports_a_layer_above_it_but_the_registry_reads():
    upward = set()
    for path in MODULES:
        me = _package(_module_name(path))
        for module in _imported(path):
            other = _package(module)
            if me and other and LAYERS[other] > LAYERS[me] and (me, other) not in UPWARD_ALLOWED:
                upward.add(f"{_module_name(path)} imports {module}")
    assert not upward, sorted(upward)


def test_only_the_runs_and_the_entry_points_import_the_comparison():
    importers = {
        _package(_module_name(path))
        for path in MODULES
        if any(_package(m) == "comparison" for m in _imported(path))
    }
    assert {p for p in importers if p and p != "comparison" and LAYERS[p] < LAYERS["runs"]} == set()


def test_the_import_reader_sees_relative_and_function_level_imports():
    """The checker itself: a relative import inside a function of term_fl/maths/x.py is term_fl.cli."""
    names = _imported(PACKAGE / "maths" / "x.py", "def f():\n    from ..cli import sweep\n    import numpy\n")
    assert names == {"term_fl.cli", "numpy"} and _package("term_fl.cli") == "cli"
