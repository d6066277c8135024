"""Every CSV term-fl writes escapes text a spreadsheet would run as a formula; numbers stay numbers.

A run name such as ``=HYPERLINK("http://evil.example", "x")`` reaches the
runs table of the dashboard (``/api/runs.csv``), ``term-fl runs --format
csv``, a comparison's runs table and a report's inlined CSVs; each must hold
it as ``'=HYPERLINK(...)``. A negative number (TERM's t = -2) is not text and
is not escaped.
"""

from __future__ import annotations

import csv
import io
import json
import shutil
import subprocess

import pytest
from fastapi.testclient import TestClient

from term_fl.cli.commands import main
from term_fl.cli.sweep import write_comparison
from term_fl.common.csvcells import csv_cell
from term_fl.dashboard import compare_view, create_app
from term_fl.dashboard.render import STATIC_DIR
from term_fl.results import ResultsStore

from test_dashboard import build_store

CELLS = [  # (value, as a CSV cell)
    ('=HYPERLINK("http://evil.example","x")', '\'=HYPERLINK("http://evil.example","x")'),
    ("+1+1", "'+1+1"), ("-2+3", "'-2+3"), ("@SUM(A1:A9)", "'@SUM(A1:A9)"), ("\tcmd", "'\tcmd"), ("\rcmd", "'\rcmd"),
    ("term t=-2", "term t=-2"), ("", ""), (-2.0, -2.0), (-3, -3), (0.5, 0.5), (None, None),
]
HOSTILE_NAMES = [value for value, escaped in CELLS if isinstance(value, str) and value != escaped]


def test_text_that_starts_like_a_formula_is_escaped_and_numbers_are_not():
    assert [csv_cell(value) for value, _ in CELLS] == [escaped for _, escaped in CELLS]


@pytest.mark.skipif(shutil.which("node") is None, reason="needs node to run the page script")
def test_the_report_script_escapes_by_the_same_rule():
    """A static report builds its curves CSV in the browser (compare.js): common.js's csvCell is csv_cell."""
    program = (
        "const vm = require('vm'), fs = require('fs');"
        "const document = {getElementById: (id) => id === 'statistics' ? {textContent: '[]'} : null,"
        "                  querySelectorAll: () => []};"
        "const context = vm.createContext({document, window: {}});"
        f"const csvCell = vm.runInContext(fs.readFileSync({json.dumps(str(STATIC_DIR / 'common.js'))}, 'utf8')"
        "                                 + ';TermFL.csvCell', context);"
        "process.stdout.write(JSON.stringify(JSON.parse(process.argv[1]).map(csvCell)));"
    )
    values = [value for value, _ in CELLS]
    out = subprocess.run(["node", "-e", program, json.dumps(values)], capture_output=True, text=True, check=True,
                         timeout=60).stdout
    assert json.loads(out) == [escaped for _, escaped in CELLS]


@pytest.fixture(scope="module")
def hostile_store(tmp_path_factory):
    """Runs named like formulas, of TERM with t = -2 (a negative number in a numeric column)."""
    path = tmp_path_factory.mktemp("csv") / "results.db"
    runs = [(f"run-{i}", "term", {"t": -2.0, "lam": 1.0, "tau": 0.0}, i, name, None, None, True)
            for i, name in enumerate(HOSTILE_NAMES)]
    build_store(path, runs=runs)
    return path


def read_csv(text: str) -> list[dict[str, str]]:
    return list(csv.DictReader(io.StringIO(text, newline="")))


def assert_escaped(rows: list[dict[str, str]]) -> None:
    names = {row["run_id"]: row["name"] for row in rows}
    assert names == {f"run-{i}": dict(CELLS)[name] for i, name in enumerate(HOSTILE_NAMES)}
    assert {row["t"] for row in rows} == {"-2.0"} and all(not row["seed"].startswith("'") for row in rows)


def test_the_dashboards_runs_csv_escapes_formulas(hostile_store):
    with TestClient(create_app(hostile_store)) as client:
        assert_escaped(read_csv(client.get("/api/runs.csv").text))
        runs = [("run", f"run-{i}") for i in range(len(HOSTILE_NAMES))]
        assert_escaped(read_csv(client.get("/api/compare.csv", params=[*runs, ("table", "runs")]).text))


def test_term_fl_runs_csv_escapes_formulas(hostile_store, capsys):
    assert main(["runs", "--db", str(hostile_store), "--format", "csv"]) == 0
    assert_escaped(read_csv(capsys.readouterr().out))


def test_a_reports_inlined_csv_escapes_formulas(hostile_store):
    with ResultsStore.open_readonly(hostile_store) as store:
        data = compare_view.compare(store, run_ids=[f"run-{i}" for i in range(len(HOSTILE_NAMES))])
    assert_escaped(read_csv(compare_view.table_csv(data, "runs")))


def test_a_sweeps_comparison_csv_escapes_text_and_keeps_numbers(tmp_path):
    rows = [{"cell": "=1+1", "strategy": "term", "n": 2, "seeds": [0, 1], "config_hash": "h", "test.mean": -0.5}]
    write_comparison(tmp_path, rows, {}, 1.0)
    (row,) = read_csv((tmp_path / "comparison.csv").read_text())
    assert (row["cell"], row["test.mean"], row["n"]) == ("'=1+1", "-0.5", "2")
