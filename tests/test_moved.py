"""The module names of term-fl 0.2 still import for one release: with a DeprecationWarning, as the same module."""

import importlib
import json
import subprocess
import sys

import pytest

from term_fl._moved import MOVED


def test_every_old_name_imports_the_moved_module_with_a_deprecation_warning():
    # one fresh interpreter, so that no old name was imported before
    code = (
        "import importlib, json, warnings\n"
        "from term_fl._moved import MOVED\n"
        "out = {}\n"
        "for old, new in MOVED.items():\n"
        "    with warnings.catch_warnings(record=True) as caught:\n"
        "        warnings.simplefilter('always')\n"
        "        module = importlib.import_module(old)\n"
        "    out[old] = [module is importlib.import_module(new),\n"
        "                [str(w.message) for w in caught if w.category is DeprecationWarning]]\n"
        "print(json.dumps(out))\n"
    )
    out = json.loads(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout)
    assert set(out) == set(MOVED)
    for old, new in MOVED.items():
        same, warned = out[old]
        assert same, old
        assert any(w.startswith(f"{old} moved to {new}") for w in warned), (old, warned)


def test_from_import_of_an_old_name_gives_the_same_objects():
    with pytest.warns(DeprecationWarning, match="term_fl.tilting moved to term_fl.maths.tilting"):
        sys.modules.pop("term_fl.tilting", None)
        from term_fl import tilting
    from term_fl.maths.tilting import tilted_weights

    assert tilting.tilted_weights is tilted_weights
    assert importlib.import_module("term_fl.maths.tilting").__spec__.name == "term_fl.maths.tilting"


def test_old_comparison_names_forward_with_a_warning_and_submodules_import_plainly():
    import term_fl.comparison as comparison
    from term_fl.comparison import cells, summaries

    with pytest.warns(DeprecationWarning, match="term_fl.comparison.group_cells moved"):
        assert comparison.group_cells is summaries.group_cells
    assert cells.__name__ == "term_fl.comparison.cells"
    with pytest.raises(AttributeError):
        comparison.no_such_name  # noqa: B018


def test_the_user_helper_keeps_its_old_import_path():
    with pytest.warns(DeprecationWarning, match="term_fl.client moved to term_fl.plugin.losses"):
        sys.modules.pop("term_fl.client", None)
        from term_fl.client import pre_training_loss
    from term_fl.plugin import pre_training_loss as new

    assert pre_training_loss is new
