"""The documents stand on their own: no file cites design notes outside the repository, and what docs/ names exists."""

from __future__ import annotations

import importlib
import re
import subprocess
from pathlib import Path

import pytest

from conftest import REPO

# Spelled in pieces so that this file does not match itself.
OUTSIDE_DESIGN = ("DESIGN" + ".md", "shared" + "/design")
DOCUMENTS = sorted([REPO / "README.md", *(REPO / "docs").glob("*.md")])
SKIPPED_DIRS = {".git", ".venv", "runs", "node_modules", "__pycache__", ".pytest_cache", "build", "dist"}


def repository_files() -> list[Path]:
    """The files git tracks (and the untracked ones it does not ignore); every file outside build folders elsewhere."""
    try:
        out = subprocess.run(
            ["git", "-C", str(REPO), "ls-files", "--cached", "--others", "--exclude-standard", "-z"],
            capture_output=True, check=True, timeout=60,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return [p for p in REPO.rglob("*") if p.is_file() and not SKIPPED_DIRS & set(p.relative_to(REPO).parts)]
    return [REPO / name for name in out.decode().split("\0") if name and (REPO / name).is_file()]


def backticked(text: str) -> list[str]:
    """What a Markdown text puts in backticks (inline code)."""
    return re.findall(r"`([^`\n]+)`", text)


def resolves(dotted: str) -> bool:
    """Whether ``term_fl.a.b.C.d`` names something: the longest importable module, then attributes."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for name in parts[cut:]:
            if not hasattr(obj, name):
                return False
            obj = getattr(obj, name)
        return True
    return False


def test_no_file_of_the_repository_cites_the_design_notes_outside_it():
    files = repository_files()
    assert any(p.name == "README.md" for p in files)
    citing = sorted(
        f"{path.relative_to(REPO)}: {needle}"
        for path in files
        for needle in OUTSIDE_DESIGN
        if needle.encode() in path.read_bytes()
    )
    assert not citing, "the design lives in docs/ (maths.md, data.md, contracts.md); cite those instead"


@pytest.mark.parametrize("document", DOCUMENTS, ids=lambda p: p.name)
def test_every_term_fl_name_a_document_mentions_exists(document):
    names = {m.group(0) for code in backticked(document.read_text()) for m in re.finditer(r"term_fl(\.\w+)+", code)}
    missing = sorted(name for name in names if not resolves(name))
    assert not missing, f"{document.name} names what term_fl does not have: {missing}"


@pytest.mark.parametrize("document", DOCUMENTS, ids=lambda p: p.name)
def test_every_file_and_test_a_document_mentions_exists(document):
    text = document.read_text()
    tests = "\n".join(p.read_text() for p in (REPO / "tests").rglob("test_*.py"))
    missing = []
    for code in backticked(text):
        path, _, test = code.partition("::")
        if re.fullmatch(r"(term_fl|tests|docs|configs|benchmarks|deploy|scripts)/[\w./-]+", path):
            if not (REPO / path).exists():
                missing.append(path)
            elif test and f"def {test}(" not in (REPO / path).read_text():
                missing.append(code)
        elif re.fullmatch(r"test_[a-z0-9]+_\w+", code) and f"def {code}(" not in tests:  # test_clean: a key
            missing.append(code)
    assert not missing, f"{document.name} mentions files or tests that do not exist: {missing}"


def anchors(document: Path) -> set[str]:
    """The anchors of a Markdown file's headings, as GitHub makes them (lower case, punctuation dropped, - for spaces)."""
    headings = re.findall(r"^#+ (.+)$", document.read_text(), flags=re.M)
    return {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-") for h in headings}


@pytest.mark.parametrize("document", DOCUMENTS, ids=lambda p: p.name)
def test_every_relative_link_of_a_document_points_to_a_file_and_heading(document):
    links = re.findall(r"\]\(([^)\s]+)\)", document.read_text())
    missing = []
    for link in links:
        if re.match(r"[a-z]+:", link):
            continue
        path, _, anchor = link.partition("#")
        target = document.parent / path if path else document
        if not target.exists() or (anchor and target.suffix == ".md" and anchor not in anchors(target)):
            missing.append(link)
    assert not missing, f"{document.name} links to files or headings that do not exist: {missing}"


def test_a_name_or_heading_that_does_not_exist_is_found_missing():
    assert anchors(REPO / "docs" / "contracts.md") >= {"summaryjson", "a-round-of-the-server-loop"}
    assert resolves("term_fl.maths.tilting.tilted_objective")
    assert resolves("term_fl.strategies.term.TermFedAvg.round_step")
    assert not resolves("term_fl.maths.tilting.no_such_function")
    assert not resolves("term_fl.no_such_module.name")
