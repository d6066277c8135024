"""The plug-in template apps differ from Flower's templates only in marked lines, and docs/plugin.md counts them.

tests/plugin_apps/flower_templates/ holds Flower's templates as ``flwr new``
rendered them (flwr 1.24.0, the last release that shipped them in the
package); tests/plugin_apps/<app>/ the same apps changed to run term-fl's
strategies. Every line an app adds carries a marker saying why:
``# term-fl`` (a user swapping in any term-fl strategy), ``# term-fl: F_k``
(the pre-training loss TERM, q-FFL and AFL weight by), ``# term-fl: AFL``
(AFL's partition table) or ``# term-fl test`` (local data, seeds, and running
every strategy in one ``flwr run``). The counts per strategy are docs/plugin.md's table.
"""

from __future__ import annotations

import difflib
import re
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
APPS_DIR = REPO / "tests" / "plugin_apps"
TEMPLATES = APPS_DIR / "flower_templates"
APPS = {"numpyapp": "NumPy", "sklearnapp": "scikit-learn", "jaxapp": "JAX", "pytorchapp": "PyTorch"}
MARKER = re.compile(r"#\s*term-fl(?P<kind> test|: F_k|: AFL)?(?![\w-])")
KINDS = {None: "strategy", " test": "test", ": F_k": "loss", ": AFL": "afl"}


def changes(app: str) -> dict[str, int]:
    """Lines the app adds per marker kind, and the template lines it removes (``removed``)."""
    counts = {"strategy": 0, "loss": 0, "afl": 0, "test": 0, "removed": 0}
    for template in sorted(p for p in (TEMPLATES / app).rglob("*") if p.is_file()):
        ours = APPS_DIR / app / template.relative_to(TEMPLATES / app)
        old, new = template.read_text().splitlines(), ours.read_text().splitlines()
        for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(a=old, b=new, autojunk=False).get_opcodes():
            if tag == "equal":
                continue
            counts["removed"] += i2 - i1
            for line in new[j1:j2]:
                if not line.strip():
                    continue  # layout
                marker = MARKER.search(line)
                assert marker, f"{ours}: an unmarked change: {line!r}"
                counts[KINDS[marker.group("kind")]] += 1
    return counts


def user_lines(counts: dict[str, int]) -> dict[str, int]:
    """The lines a user changes for each strategy: FedAvg needs no loss, AFL also the partition table."""
    with_loss = counts["strategy"] + counts["loss"]
    return {"fedavg": counts["strategy"], "term": with_loss, "qffl": with_loss, "afl": with_loss + counts["afl"]}


def documented_table() -> dict[str, list[int]]:
    """docs/plugin.md's 'Lines changed' rows: app -> [FedAvg, TERM, q-FFL, AFL, test-only added, removed]."""
    text = (REPO / "docs" / "plugin.md").read_text(encoding="utf-8")
    section = text[text.index("<!-- lines-changed:start -->"):text.index("<!-- lines-changed:end -->")]
    rows = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if cells and cells[0] in APPS.values():
            rows[cells[0]] = [int(c) for c in cells[1:7]]
    return rows


@pytest.mark.parametrize("app", list(APPS))
def test_every_app_has_flowers_files_and_marks_every_line_it_adds(app):
    files = sorted(p.relative_to(TEMPLATES / app) for p in (TEMPLATES / app).rglob("*") if p.is_file())
    assert {str(f) for f in files} == {"pyproject.toml", f"{app}/__init__.py", f"{app}/client_app.py",
                                       f"{app}/server_app.py", f"{app}/task.py"}
    counts = changes(app)
    assert counts["strategy"] == 3, counts  # the import, the constructor, the dependency on term-fl
    assert counts["loss"] >= 3 and counts["afl"] >= 3, counts


def test_the_apps_name_no_download():
    for path in APPS_DIR.glob("*app/*app/*.py"):
        text = path.read_text()
        assert "flwr_datasets" not in text and "torchvision" not in text, path


def test_docs_table_gives_the_lines_each_app_changes():
    table = documented_table()
    assert set(table) == set(APPS.values())
    for app, name in APPS.items():
        counts = changes(app)
        per_strategy = user_lines(counts)
        measured = [per_strategy["fedavg"], per_strategy["term"], per_strategy["qffl"], per_strategy["afl"],
                    counts["test"], counts["removed"]]
        assert table[name] == measured, f"docs/plugin.md, {name}: {table[name]} but the files give {measured}"


def test_a_line_without_a_marker_is_reported(tmp_path, monkeypatch):
    """The check itself: an app line that is not the template's and carries no marker fails."""
    (tmp_path / "templates" / "demo").mkdir(parents=True)
    (tmp_path / "apps" / "demo").mkdir(parents=True)
    (tmp_path / "templates" / "demo" / "a.py").write_text("x = 1\n")
    (tmp_path / "apps" / "demo" / "a.py").write_text("x = 1\ny = 2\nz = 3  # term-fl: F_k\n")
    monkeypatch.setattr(sys.modules[__name__], "TEMPLATES", tmp_path / "templates")
    monkeypatch.setattr(sys.modules[__name__], "APPS_DIR", tmp_path / "apps")
    with pytest.raises(AssertionError, match="an unmarked change: 'y = 2'"):
        changes("demo")
