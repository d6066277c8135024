"""What a reader takes away from a run: times a spreadsheet reads, durations, the report's provenance, the
next commands, and the direction of every statistic."""

from __future__ import annotations

import csv
import io
import re
import shlex
import time
from datetime import datetime, timezone

import pytest
from test_dashboard import RUNS, build_store

from term_fl.cli.console import better, fairness_table, next_steps
from term_fl.dashboard import queries, write_report
from term_fl.dashboard.render import fmt_duration
from term_fl.maths.fairness import STATISTICS
from term_fl.results import ResultsStore


@pytest.fixture
def db(tmp_path):
    path = tmp_path / "results.db"
    build_store(path)
    return path


def test_the_runs_csv_has_iso_8601_utc_times_and_the_duration(db):
    with ResultsStore.open_readonly(db) as store:
        runs = queries.list_runs(store)
    rows = {row["run_id"]: row for row in csv.DictReader(io.StringIO(queries.runs_csv(runs)))}
    assert len(rows) == len(RUNS)
    for run in runs:
        row = rows[run["run_id"]]
        assert row["started_at"] == time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(run["started_at"]))
        if run["finished_at"] is None:
            assert row["finished_at"] == row["duration_s"] == ""
        else:
            assert datetime.strptime(row["finished_at"], "%Y-%m-%dT%H:%M:%SZ").replace(
                tzinfo=timezone.utc).timestamp() == int(run["finished_at"])
            assert float(row["duration_s"]) == pytest.approx(run["finished_at"] - run["started_at"], abs=0.05)


@pytest.mark.parametrize("seconds, text", [(None, "—"), (0.04, "0.0 s"), (7.46, "7.5 s"), (59.9, "59.9 s"),
                                           (200.0, "3 min 20 s"), (7500.0, "2 h 05 min")])
def test_durations_read_in_the_unit_that_fits(seconds, text):
    assert fmt_duration(seconds) == text


def test_a_report_header_says_when_by_which_version_and_of_which_configs(db, tmp_path):
    from term_fl import __version__

    before = datetime.now(timezone.utc).replace(microsecond=0)
    run_id = RUNS[0][0]
    html = write_report(db, run_id, tmp_path / "r.html").read_text()
    header = re.search(r'id="provenance">([^<]*)<', html).group(1)
    stamp, version, hashes = re.fullmatch(r"generated (\S+) by term-fl (\S+) · config hash(?:es)? (.+)",
                                          header.strip()).groups()  # fmt: skip
    made = datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=timezone.utc)
    assert before <= made <= datetime.now(timezone.utc)
    with ResultsStore.open_readonly(db) as store:
        assert version == __version__ and hashes == store.get_run(run_id).config_hash


def test_next_steps_name_this_store_and_survive_a_shell(tmp_path):
    db = tmp_path / "my runs" / "results.db"
    lines = next_steps(db, "default", run_id="run-1")
    commands = [line.split("    (")[0].strip() for line in lines[1:]]
    assert [shlex.split(c) for c in commands] == [
        ["term-fl", "dashboard", "--db", str(db)],
        ["term-fl", "report", "default", "--out", "default-report.html", "--db", str(db)],
        ["term-fl", "report", "run-1", "--out", "run-1.html", "--db", str(db)],
    ]


def test_every_statistic_of_a_table_says_which_way_is_better():
    from rich.console import Console

    out = io.StringIO()
    Console(file=out, width=200).print(fairness_table("t", {"test": {s.key: 0.5 for s in STATISTICS}}))
    for stat in STATISTICS:
        row = next(line for line in out.getvalue().splitlines() if line.lstrip("│ ").startswith(stat.label + " "))
        assert ("higher" if stat.direction > 0 else "lower") in row
        assert better(stat.key) in row
