"""`term-fl` as a user runs it: run, sweep (with resume), runs, and the errors users see."""

from __future__ import annotations

import csv
import json
import os
import re

import numpy as np
import pytest

from conftest import SMALL
from term_fl.cli.commands import main
from term_fl.maths.fairness import statistic
from term_fl.results import ResultsStore

SMALL_ARGS = [arg for item in SMALL for arg in ("--set", item)]


def test_run_prints_a_header_progress_the_table_and_the_run_dir_and_nothing_else(tmp_path, capsys):
    out, db = tmp_path / "run", tmp_path / "r.db"
    code = main(["run", "--engine", "inprocess", *SMALL_ARGS, "--out", str(out), "--db", str(db)])
    captured = capsys.readouterr()
    printed = " ".join(captured.out.split())  # rich wraps long lines at the console's width
    assert code == 0 and captured.err == ""
    # the header: scenario, seed, strategy and its parameters, data, engine, where clients train
    assert "term-fl run scenario default, seed 0" in printed
    assert "strategy TERM: t=1, lam=1, base_weighting=num_examples, loss_reduction=mean, server_lr=1" in printed
    assert "in-process engine (no Ray); clients train on the CPU" in printed
    assert "{'" not in printed  # no raw dict
    # progress (not a terminal: one line per tenth of the rounds, here every round), the table, the run dir
    for k in (1, 2, 3):
        assert f"round {k}/3 " in printed
    assert "100% " in printed and "device mean" in printed and "worst 10%" in printed and "Jain's index" in printed
    assert "pooled" in printed and "average" not in printed  # the pooled accuracy is never called 'average'
    assert str(out) in printed and "finished" in printed
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "finished" and summary["rounds_completed"] == 3
    assert json.loads((out / "config.json").read_text())["data"]["synthetic"]["num_devices"] == 6
    assert (out / "model.pt").is_file()
    assert ResultsStore.open_readonly(db).get_run(summary["run_id"]).status == "finished"


def test_run_with_a_reference_runs_fedavg_on_the_same_seed_and_shows_the_differences(tmp_path, capsys):
    out, db = tmp_path / "run", tmp_path / "r.db"
    code = main(["run", "--engine", "inprocess", *SMALL_ARGS, "--set", "run.reference=fedavg", "--set", "strategy.t=2",
                 "--set", "run.evaluate_every=2", "--out", str(out), "--db", str(db)])
    printed = capsys.readouterr().out
    assert code == 0
    assert "reference fedavg round 3/3" in printed and "term t=2 - fedavg" in printed
    main_run, reference = (json.loads((path / "summary.json").read_text())
                           for path in (out, tmp_path / "run-reference-fedavg"))
    assert main_run["strategy"]["name"] == "term" and reference["strategy"]["name"] == "fedavg"
    assert reference["seed"] == main_run["seed"] and reference["reference_hash"] == main_run["reference_hash"]
    assert reference["config_hash"] == main_run["reference_hash"]  # the reference is the run's plain-FedAvg twin
    store = ResultsStore.open_readonly(db)
    assert {r.strategy for r in store.list_runs()} == {"term", "fedavg"}
    assert store.get_run(reference["run_id"]).name == "default (reference: fedavg)"
    # the difference column is the difference of the two runs' test statistics
    diff = main_run["test"]["worst_10"] - reference["test"]["worst_10"]
    row = next(line for line in printed.splitlines() if line.lstrip("│ ").startswith("worst 10%"))
    assert f"{diff:+.4f}" in row


def test_run_with_two_references_runs_each_after_the_run_and_shows_the_difference_to_each(tmp_path, capsys,
                                                                                          monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")  # the table on one line per row
    out, db = tmp_path / "run", tmp_path / "r.db"
    code = main(["run", "--engine", "inprocess", *SMALL_ARGS, "--set", 'run.reference=["fedavg", "qffl"]',
                 "--set", "strategy.t=2", "--set", "strategy.qffl.q=3", "--out", str(out), "--db", str(db)])
    printed = capsys.readouterr().out
    assert code == 0
    assert "then its references: FedAvg, q-FFL, on the same seed" in " ".join(printed.split())
    summaries = [json.loads((path / "summary.json").read_text())
                 for path in (out, tmp_path / "run-reference-fedavg", tmp_path / "run-reference-qffl")]
    assert [s["strategy"]["name"] for s in summaries] == ["term", "fedavg", "qffl"]
    assert summaries[2]["strategy"]["q"] == 3.0  # the scenario's settings of q-FFL, no client tilt
    assert len({s["seed"] for s in summaries}) == 1
    store = ResultsStore.open_readonly(db)
    assert [r.name for r in sorted(store.list_runs(), key=lambda r: r.started_at)] == [
        "default", "default (reference: fedavg)", "default (reference: qffl)"]
    # one column per run, then the run's difference to each reference, in the order of run.reference
    header = next(line for line in printed.splitlines() if "term t=2 - fedavg" in line)
    assert header.index("term t=2 - fedavg") < header.index("term t=2 - qffl q=3")
    for label, key in (("worst 10%", "worst_10"), ("VaR", "var")):
        row = next(line for line in printed.splitlines() if line.lstrip("│ ").startswith(label + " "))
        cells = [cell.strip() for cell in row.strip("│ ").split("│")]
        test = [s["test"][key] for s in summaries]
        assert cells[1] == ("higher" if statistic(key).direction > 0 else "lower")
        assert cells[2:] == [f"{v:.4f}" for v in test] + [f"{test[0] - test[1]:+.4f}", f"{test[0] - test[2]:+.4f}"]


def test_no_reference_runs_the_scenario_alone(tmp_path, capsys):
    db = tmp_path / "r.db"
    assert main(["run", "--engine", "inprocess", *SMALL_ARGS, "--set", "run.reference=fedavg", "--no-reference",
                 "--out", str(tmp_path / "run"), "--db", str(db)]) == 0
    assert "reference round" not in capsys.readouterr().out
    assert [r.strategy for r in ResultsStore.open_readonly(db).list_runs()] == ["term"]
    assert not list(tmp_path.glob("run-reference*"))


def test_rounds_and_seed_shortcuts_override_the_scenario(tmp_path):
    out = tmp_path / "run"
    assert main(["run", "--engine", "inprocess", *SMALL_ARGS, "--rounds", "2", "--seed", "5",
                 "--out", str(out), "--db", str(tmp_path / "r.db")]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["rounds_completed"] == 2 and summary["seed"] == 5


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--set", "strategy.t=5000"], "strategy.term.t: Input should be less than or equal to 1000"),
        (["--set", "strategy.tt=1"], "strategy.tt: unknown key"),
        (["--set", "nonsense"], "expected KEY=VALUE"),
        (["--set", "data.name=vehicle", "--set", "data.path=/nonexistent/v.json"], "does not exist"),
    ],
)
def test_bad_input_exits_2_with_a_message_naming_the_key(args, message, tmp_path, capsys):
    code = main(["run", "--engine", "inprocess", *args, "--db", str(tmp_path / "r.db")])
    assert code == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "r.db").exists()  # nothing started, nothing recorded


def test_missing_scenario_file_is_a_clear_error(tmp_path, capsys):
    assert main(["run", str(tmp_path / "nope.toml")]) == 2
    assert "does not exist" in capsys.readouterr().err


def sweep_file(tmp_path):
    path = tmp_path / "sweep.toml"
    path.write_text(
        'name = "mini"\n[run]\nrounds = 2\nclients_per_round = 3\n'
        "[data]\nnum_devices = 6\nmax_samples = 60\ntrain_fraction = 0.6\nval_fraction = 0.2\ntest_fraction = 0.2\n"
        '[sweep]\n"strategy.name" = ["fedavg", "term"]\n"strategy.t" = [1.0, 5.0]\n"run.seed" = [0, 1]\n'
    )
    return path


def test_sweep_runs_each_distinct_cell_and_writes_the_comparison(tmp_path, capsys):
    out, db = tmp_path / "sweep", tmp_path / "r.db"
    assert main(["sweep", str(sweep_file(tmp_path)), "--out", str(out), "--db", str(db)]) == 0
    printed = capsys.readouterr().out
    assert "6 cells on engine inprocess (executor compiled)" in printed  # auto, logreg; fedavg x 2 seeds + term x 2 t x 2 seeds
    assert f"  term-fl dashboard --db {db}    (then open /compare?scenario=mini)" in printed.splitlines()
    # off a terminal (pytest captures stdout) each cell's progress is two lines: after its first and last round
    progress = re.findall(r"^\[cell (\d)/6\] .* round (\d)/2 ", printed, flags=re.M)
    assert progress == [(str(i), str(k)) for i in range(1, 7) for k in (1, 2)]
    rows = list(csv.DictReader((out / "comparison.csv").open()))
    assert sorted(r["cell"] for r in rows) == ["fedavg", "term t=1", "term t=5"]
    assert all(r["n"] == "2" for r in rows)
    comparison = json.loads((out / "comparison.json").read_text())
    assert comparison["selection"]["term"]["cell"] in {"term t=1", "term t=5"}
    assert len(ResultsStore.open_readonly(db).list_runs(scenario="mini")) == 6


def test_sweep_pairs_each_cell_with_fedavg_and_selects_on_the_tail_of_the_validation_curve(tmp_path, capsys):
    path = sweep_file(tmp_path)
    path.write_text(path.read_text().replace("rounds = 2", "rounds = 10")
                    + "[selection]\ntail = 3\nobjective = \"worst_10\"\n")
    out, db = tmp_path / "sweep", tmp_path / "r.db"
    assert main(["sweep", str(path), "--out", str(out), "--db", str(db)]) == 0
    printed = " ".join(capsys.readouterr().out.split())  # rich wraps long lines at 80 columns
    assert "paired difference, cell minus baseline (FedAvg)" in printed and "over the last fifth of the rounds" in printed
    assert "significant: p_holm < 0.05" in printed and "Differences over fewer than 3 seeds are never marked" in printed
    comparison = json.loads((out / "comparison.json").read_text())
    rows = {r["cell"]: r for r in comparison["cells"]}
    store = ResultsStore.open_readonly(db)
    # validation_tail: each run's last 3 evaluated rounds, then the mean over seeds
    for cell in ("fedavg", "term t=1"):
        per_run = [np.mean([r["worst_10"] for r in store.load_round_stats(run_id, "val")[-3:]])
                   for run_id in rows[cell]["run_ids"]]
        assert rows[cell]["validation_tail.worst_10"] == pytest.approx(np.mean(per_run))
    # paired: per seed, term's test statistic minus fedavg's
    fedavg = {store.get_run(i).seed: store.get_run(i).summary["test"] for i in rows["fedavg"]["run_ids"]}
    term = {store.get_run(i).seed: store.get_run(i).summary["test"] for i in rows["term t=5"]["run_ids"]}
    diffs = [term[s]["worst_10"] - fedavg[s]["worst_10"] for s in (0, 1)]
    assert rows["term t=5"]["paired_seeds"] == 2
    assert rows["term t=5"]["test.worst_10.diff"] == pytest.approx(np.mean(diffs))
    assert "paired_seeds" not in rows["fedavg"]
    assert "validation_tail" in comparison["selection"]["term"]["rule"]
    # every paired difference carries its test; 2 seeds: never marked; comparison.csv holds the same numbers
    worst = rows["term t=5"]["differences"]["fedavg"]["test"]["worst_10"]
    assert set(worst) >= {"mean", "se", "n", "p_value", "p_holm", "ci95", "p_signflip", "significant"}
    assert worst["significant"] is False and worst["n"] == 2
    assert comparison["significance"]["rule"].startswith("* significant: p_holm < 0.05")
    assert comparison["baselines"] == [{"strategy": "fedavg", "label": "FedAvg"},
                                       {"strategy": "fedavg_uniform", "label": "FedAvg (uniform)"}]
    flat = {r["cell"]: r for r in csv.DictReader((out / "comparison.csv").open())}["term t=5"]
    for field in ("mean", "p_value", "p_holm", "p_signflip"):
        got = flat[f"test.worst_10.minus_fedavg.{field}"]
        assert (float(got) if got else None) == pytest.approx(worst[field])
    assert [float(flat[f"test.worst_10.minus_fedavg.ci95_{end}"]) for end in ("lo", "hi")] == pytest.approx(worst["ci95"])
    assert flat["test.worst_10.minus_fedavg.significant"] == "False"


def test_sweep_resumes_without_redoing_finished_cells(tmp_path, capsys):
    out, db = tmp_path / "sweep", tmp_path / "r.db"
    args = ["sweep", str(sweep_file(tmp_path)), "--out", str(out), "--db", str(db)]
    assert main(args) == 0
    # an interrupted sweep: one cell never finished (its summary.json says so)
    unfinished = out / "term_t=5_seed=1"
    earlier = json.loads((unfinished / "summary.json").read_text())
    (unfinished / "summary.json").write_text(json.dumps({**earlier, "status": "interrupted"}))
    capsys.readouterr()
    assert main(args) == 0
    printed = capsys.readouterr().out
    assert printed.count("already finished, skipped") == 5
    rerun = json.loads((unfinished / "summary.json").read_text())
    assert rerun["status"] == "finished" and rerun["run_id"] != earlier["run_id"]
    # the earlier attempt's files were moved aside, not overwritten
    moved = unfinished / "earlier" / earlier["run_id"]
    assert json.loads((moved / "summary.json").read_text())["status"] == "interrupted"
    assert ResultsStore.open_readonly(db).get_run(earlier["run_id"]).run_dir == str(moved)  # the row follows
    assert len(ResultsStore.open_readonly(db).list_runs(scenario="mini")) == 7


def test_a_crash_between_the_store_row_and_summary_json_does_not_redo_the_cell(tmp_path, capsys):
    """The store row is finished first; a cell whose summary.json was never written is rebuilt from it."""
    out, db = tmp_path / "sweep", tmp_path / "r.db"
    args = ["sweep", str(sweep_file(tmp_path)), "--out", str(out), "--db", str(db)]
    assert main(args) == 0
    cell = out / "term_t=5_seed=1"
    written = json.loads((cell / "summary.json").read_text())
    (cell / "summary.json").unlink()  # the process died after finish_run, before summary.json
    capsys.readouterr()
    assert main(args) == 0
    assert capsys.readouterr().out.count("already finished, skipped") == 6
    assert json.loads((cell / "summary.json").read_text())["run_id"] == written["run_id"]
    assert len(ResultsStore.open_readonly(db).list_runs(scenario="mini")) == 6


def test_the_store_row_is_finished_before_summary_json_is_written(tmp_path, monkeypatch):
    """Write order (README, "Results store"): model.pt, summary.json's text under a temporary name, the store row,
    then summary.json: a reader that sees summary.json always finds the store row finished too."""
    seen = {}
    finish_run = ResultsStore.finish_run

    def spy(store, run_id, status="finished", summary=None, error=None):
        out = tmp_path / "o"
        seen.update(files=sorted(p.name for p in out.iterdir()), status=status)
        return finish_run(store, run_id, status, summary, error)

    monkeypatch.setattr(ResultsStore, "finish_run", spy)
    assert main(["run", "--engine", "inprocess", *SMALL_ARGS, "--out", str(tmp_path / "o"),
                 "--db", str(tmp_path / "r.db")]) == 0
    assert seen == {"status": "finished", "files": [".summary.json.tmp", ".term-fl.lock", "checkpoint.npz",
                                                    "config.json", "model.pt"]}
    assert sorted(p.name for p in (tmp_path / "o").iterdir()) == ["config.json", "model.pt", "summary.json"]


def test_sweep_cells_have_readable_names_and_old_folders_resume(tmp_path, capsys):
    out, db = tmp_path / "sweep", tmp_path / "r.db"
    args = ["sweep", str(sweep_file(tmp_path)), "--out", str(out), "--db", str(db)]
    assert main(args) == 0
    assert "[cell 3/6] term t=1 seed=0" in capsys.readouterr().out
    assert sorted(p.name for p in out.iterdir() if p.is_dir()) == [
        "fedavg_seed=0", "fedavg_seed=1", "term_t=1_seed=0", "term_t=1_seed=1", "term_t=5_seed=0", "term_t=5_seed=1"]
    names = sorted(r.name for r in ResultsStore.open_readonly(db).list_runs(scenario="mini"))
    assert names[0] == "mini fedavg seed=0" and names[-1] == "mini term t=5 seed=1"
    # a sweep folder written by term-fl 0.1 (cells named by their dotted keys) resumes without rerunning
    (out / "term_t=5_seed=1").rename(out / "strategy.name=term_strategy.t=5.0_run.seed=1")
    assert main(args) == 0
    assert capsys.readouterr().out.count("already finished, skipped") == 6
    assert len(ResultsStore.open_readonly(db).list_runs(scenario="mini")) == 6


def test_sweep_without_a_sweep_table_says_how_to_add_one(tmp_path, capsys):
    path = tmp_path / "plain.toml"
    path.write_text("[run]\nrounds = 1\n")
    assert main(["sweep", str(path), "--db", str(tmp_path / "r.db")]) == 2
    assert "has no [sweep] table" in capsys.readouterr().err


def test_runs_lists_the_store_and_reports_a_missing_store(tmp_path, capsys):
    db = tmp_path / "r.db"
    assert main(["run", "--engine", "inprocess", *SMALL_ARGS, "--out", str(tmp_path / "x"), "--db", str(db)]) == 0
    capsys.readouterr()
    assert main(["runs", "--db", str(db)]) == 0
    assert "default" in capsys.readouterr().out
    assert main(["runs", "--db", str(tmp_path / "missing.db")]) == 2
    assert "does not exist" in capsys.readouterr().err


def test_sweep_uses_the_engine_the_scenario_names(tmp_path, capsys, monkeypatch):
    import term_fl.cli.sweep as sweep_module
    import term_fl.cli.sweep_groups as sweep_groups

    import contextlib

    seen = {}
    monkeypatch.setattr(sweep_module, "engine_session", lambda scenario: contextlib.nullcontext())  # no Ray
    monkeypatch.setattr(sweep_groups, "run_one", lambda cell, *a, **k: seen.setdefault("engine", cell.run.engine)
                        and (_ for _ in ()).throw(RuntimeError("stop")))
    main(["sweep", str(sweep_file(tmp_path)), "--set", "run.engine=flower", "--out", str(tmp_path / "o"),
          "--db", str(tmp_path / "r.db")])
    assert seen["engine"] == "flower"


@pytest.mark.parametrize("flag, expected", [([], False), (["--access-log"], True)])
def test_dashboard_access_log_is_off_unless_asked_for(flag, expected, tmp_path, monkeypatch):
    import term_fl.dashboard

    calls = []
    monkeypatch.delenv("TERM_FL_DASHBOARD_TOKEN", raising=False)
    monkeypatch.setattr(term_fl.dashboard, "serve", lambda db, **kw: calls.append(kw))
    (tmp_path / "r.db").touch()
    assert main(["dashboard", "--db", str(tmp_path / "r.db"), "--port", "8123", *flag]) == 0
    assert calls == [{"host": "127.0.0.1", "port": 8123, "access_log": expected, "allowed_hosts": [], "token": None}]


def test_a_run_that_started_and_failed_exits_1_with_a_message(tmp_path, capsys, monkeypatch):
    """Not a usage error (2): the run is recorded as failed, and the exit status says it failed."""
    import term_fl.engines as engines
    from term_fl.federation.loop import FederationError

    def failing(scenario, recorder, on_round=None, resume=None):
        raise FederationError("every round failed (1 of 1)")

    monkeypatch.setattr("term_fl.runs.run.run_scenario", failing)
    code = main(["run", "--engine", "inprocess", *SMALL_ARGS, "--out", str(tmp_path / "o"),
                 "--db", str(tmp_path / "r.db")])
    err = capsys.readouterr().err
    assert code == 1 and "the run failed: every round failed (1 of 1)" in err and "Traceback" not in err
    assert engines.run_scenario is not failing


def test_runs_as_table_json_and_csv_with_filters_and_full_ids(tmp_path, capsys):
    from test_dashboard import RUNS, build_store

    db = tmp_path / "r.db"
    build_store(db, runs=[(f"20261126-000000-abcdef-long-run-id-{r[0]}", *r[1:]) for r in RUNS])
    ids = [f"20261126-000000-abcdef-long-run-id-{r[0]}" for r in reversed(RUNS)]
    assert main(["runs", "--db", str(db)]) == 0
    table = capsys.readouterr().out
    assert all(run_id in table for run_id in ids)  # never cut, whatever the width
    assert "term t=1" in table and "device mean" in table and "6 runs" in table

    assert main(["runs", "--db", str(db), "--format", "json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert [r["run_id"] for r in listed] == ids
    assert listed[0]["final"]["test"]["worst_10"] is not None and listed[0]["params"]["t"] == 1.0

    assert main(["runs", "--db", str(db), "--format", "csv", "--strategy", "qffl"]) == 0
    rows = list(csv.DictReader(capsys.readouterr().out.splitlines()))
    assert [r["run_id"] for r in rows] == [i for i in ids if i.endswith("qffl-1")] and rows[0]["q"] == "1.0"

    assert main(["runs", "--db", str(db), "--format", "json", "--status", "running", "--strategy", "term"]) == 0
    assert [r["run_id"] for r in json.loads(capsys.readouterr().out)] == [ids[0]]
    assert main(["runs", "--db", str(db), "--scenario", "vehicle", "--limit", "2"]) == 0
    assert "the newest 2 of 6 runs" in capsys.readouterr().out
    assert main(["runs", "--db", str(db), "--limit", "0"]) == 0
    assert "6 runs" in capsys.readouterr().out
    assert main(["runs", "--db", str(db), "--limit", "-1"]) == 2
    assert "--limit -1: allowed 0 (all runs) to 9223372036854775807" in capsys.readouterr().err


def test_runs_table_shows_the_newest_50_and_json_every_run(tmp_path, capsys, monkeypatch):
    from test_dashboard import RUNS, build_store

    db = tmp_path / "r.db"
    build_store(db, runs=RUNS)
    monkeypatch.setattr("term_fl.cli.views.RUNS_TABLE_LIMIT", 4)
    assert main(["runs", "--db", str(db)]) == 0
    table = capsys.readouterr().out
    assert "the newest 4 of 6 runs" in table and "fedavg-1" not in table
    assert main(["runs", "--db", str(db), "--format", "json"]) == 0
    assert len(json.loads(capsys.readouterr().out)) == 6


@pytest.mark.parametrize("fmt", ["table", "csv"])
def test_runs_imports_neither_flower_nor_torch_nor_ray_nor_the_web_app(tmp_path, fmt):
    """`term-fl runs` reads the store: no Flower, torch, Ray, FastAPI or plotly (it took 9.5 s to start when it
    imported them); the strategy registry's names and labels are read without importing the strategy classes."""
    import subprocess
    import sys

    from test_dashboard import RUNS, build_store

    db = tmp_path / "r.db"
    build_store(db, runs=RUNS[:2])
    code = (
        "import sys; from term_fl.cli.commands import main; rc = main(['runs', '--db', sys.argv[1], '--format', sys.argv[2]]); "
        "heavy = sorted({m.split('.')[0] for m in sys.modules} & {'flwr', 'torch', 'ray', 'fastapi', 'plotly'}); "
        "print('HEAVY', heavy, rc, file=sys.stderr)"
    )
    out = subprocess.run([sys.executable, "-c", code, str(db), fmt], capture_output=True, text=True, timeout=120,
                         env={**os.environ, "COLUMNS": "200"})
    assert "HEAVY [] 0" in out.stderr, out.stderr
    assert "fedavg-1" in out.stdout


def test_runs_piped_into_a_reader_that_goes_away_stops_quietly(tmp_path):
    """`term-fl runs | head`: when the reader of stdout is gone, no error message and no traceback, and the
    exit status a shell gives a Unix tool killed by SIGPIPE (141), not the usage error's 2."""
    import subprocess
    import sys

    from test_dashboard import RUNS, build_store

    db = tmp_path / "r.db"
    build_store(db, runs=RUNS[:2])
    child = subprocess.Popen([sys.executable, "-m", "term_fl", "runs", "--db", str(db), "--format", "json"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE)  # fmt: skip
    child.stdout.close()  # the reader is gone before the child writes (it takes a while to start)
    err = child.stderr.read().decode()
    assert child.wait(timeout=120) == 141, err
    assert err == ""


@pytest.mark.parametrize(
    "argv, executor",
    [
        (["--engine", "flower"], "sequential"),  # the file's cohort executor gives way to Flower's ClientApps
        (["--engine", "flower", "--executor", "cohort"], "cohort"),  # asked for: the engine check names both
        (["--engine", "flower", "--set", "run.executor=cohort"], "cohort"),
        (["--engine", "inprocess"], None),  # the file's choice stands
        ([], None),
    ],
)
def test_engine_flower_on_the_command_line_runs_the_sequential_executor(argv, executor):
    from term_fl.cli.commands import build_parser, resolve_overrides

    overrides = resolve_overrides(build_parser().parse_args(["run", *argv]))
    assert overrides.get("run.executor") == executor
