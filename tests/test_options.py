"""Every option of every subcommand does something: it changes the resolved scenario or the output, or it is
refused with a message. No option is accepted and ignored (``term-fl sweep --seed 5`` was, in 0.2).

:data:`CHECKED` lists each subcommand's options with the test that shows what it does;
``test_every_option_of_the_parser_is_checked`` fails when the parser gains an option this file does not check.
"""

from __future__ import annotations

import argparse
import json

import pytest

import term_fl.cli.commands as commands
import term_fl.cli.sweep as sweep_module
import term_fl.dashboard
from term_fl.cli.commands import build_parser, main
from term_fl.config import load_scenario

SMALL_RUN = ["--rounds", "2", "--set", "data.synthetic.num_devices=6", "--set", "data.synthetic.max_samples=60",
             "--set", "run.clients_per_round=3", "--set", "run.evaluate_every=1"]  # fmt: skip

CHECKED = {
    "run": {"config", "--rounds", "--seed", "--engine", "--executor", "--set", "--out", "--db", "--verbose",
            "--no-reference", "--debug", "--ray-address", "--resume"},
    "sweep": {"config", "--rounds", "--seed", "--engine", "--executor", "--set", "--out", "--db", "--verbose",
              "--group-size", "--debug", "--ray-address", "--parallel", "--max-cells"},
    "dashboard": {"--db", "--host", "--port", "--access-log", "--allowed-host", "--debug"},
    "report": {"run_or_scenario", "--out", "--db", "--debug"},
    "runs": {"--db", "--scenario", "--strategy", "--status", "--format", "--limit", "--debug"},
}  # fmt: skip


def _options(parser: argparse.ArgumentParser) -> set[str]:
    """A parser's options by their longest name (positionals by their name), -h/--help left out."""
    names = set()
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction):
            continue
        names.add(max(action.option_strings, key=len) if action.option_strings else action.dest)
    return names


def test_every_option_of_the_parser_is_checked():
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    assert {name: _options(parser) for name, parser in sub.choices.items()} == CHECKED


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """The quick start, small: TERM and its two references, 2 rounds each, in its own store."""
    root = tmp_path_factory.mktemp("store")
    assert main(["run", *SMALL_RUN, "--out", str(root / "run"), "--db", str(root / "r.db")]) == 0
    return root / "r.db"


def _resolved(command: str, *argv: str):
    """The scenario ``term-fl COMMAND ARGV`` would run (no run starts)."""
    args = build_parser().parse_args([command, *argv])
    return load_scenario(args.config, commands.resolve_overrides(args))


@pytest.mark.parametrize("command", ["run", "sweep"])
@pytest.mark.parametrize("argv, key, value", [
    (["--rounds", "7"], "rounds", 7),
    (["--seed", "5"], "seed", 5),
    (["--engine", "flower"], "engine", "flower"),
    (["--executor", "sequential"], "executor", "sequential"),
    (["--set", "run.clients_per_round=4"], "clients_per_round", 4),
    (["--ray-address", "10.0.0.1:6379"], "ray_address", "10.0.0.1:6379"),
])  # fmt: skip
def test_scenario_options_change_the_resolved_scenario(command, argv, key, value):
    default = _resolved(command)
    assert getattr(default.run, key) != value
    assert getattr(_resolved(command, *argv).run, key) == value


def test_config_names_the_scenario_file(tmp_path):
    path = tmp_path / "mine.toml"
    path.write_text('name = "mine"\n')
    assert _resolved("run", str(path)).name == "mine" != _resolved("run").name


@pytest.mark.parametrize("argv, words", [
    (["--seed", "5"], "--seed: run.seed is set per cell by the scenario's [sweep] table"),
    (["--set", "strategy.name=term"], "--set strategy.name: strategy.name is set per cell"),
    (["--set", "run.reference=qffl"], "--set run.reference: a sweep pairs each cell with the baseline cells"),
    (["--group-size", "0"], "--group-size must be a positive number of cells"),
])  # fmt: skip
def test_sweep_refuses_what_it_would_ignore(argv, words, capsys, monkeypatch):
    monkeypatch.setattr(sweep_module, "run_sweep", lambda *a, **k: pytest.fail("the sweep started"))
    assert main(["sweep", *argv]) == 2
    assert words in capsys.readouterr().err


def test_sweep_passes_its_output_options_on(tmp_path, monkeypatch):
    seen = {}
    monkeypatch.setattr(sweep_module, "run_sweep", lambda scenario, **kw: seen.update(kw, scenario=scenario) or 0)
    monkeypatch.setattr("term_fl.cli.console.route_logs", lambda console, verbose: seen.update(verbose=verbose))
    argv = ["--rounds", "3", "--out", str(tmp_path / "o"), "--db", str(tmp_path / "r.db"), "--group-size", "4", "-v",
            "--parallel", "2", "--max-cells", "50"]
    assert main(["sweep", *argv]) == 0
    assert (seen["out_dir"], seen["db"], seen["group_size"]) == (tmp_path / "o", tmp_path / "r.db", 4)
    assert (seen["parallel"], seen["max_cells"]) == (2, 50)
    assert seen["verbose"] is True and seen["scenario"].run.rounds == 3


def test_run_writes_where_out_and_db_say(store):
    from term_fl.results import ResultsStore

    with ResultsStore.open_readonly(store) as s:
        names = sorted(r.name for r in s.list_runs())
    assert names == ["default", "default (reference: fedavg)", "default (reference: fedavg_uniform)"]
    assert (store.parent / "run" / "summary.json").is_file()
    assert (store.parent / "run-reference-fedavg" / "summary.json").is_file()


def test_no_reference_runs_alone_and_verbose_prints_each_round(tmp_path, capsys):
    argv = ["run", *SMALL_RUN, "--no-reference", "--db", str(tmp_path / "r.db"), "--out", str(tmp_path / "o")]
    assert main(argv) == 0
    quiet = capsys.readouterr().out
    assert main([*argv[:-1], str(tmp_path / "o2"), "-v"]) == 0
    verbose = capsys.readouterr().out
    assert "then its references" not in quiet and not (tmp_path / "o-reference-fedavg").exists()
    # off a terminal: the progress bar's lines (elapsed, left) without -v, one line per round with its time with -v
    assert "elapsed" in quiet and "elapsed" not in verbose
    db = tmp_path / "r.db"
    assert f"  term-fl dashboard --db {db}    (then open /compare?scenario=default)" in quiet.splitlines()
    assert f"  term-fl report default --out default-report.html --db {db}" in quiet.splitlines()
    assert [line.split()[:2] for line in verbose.splitlines() if line.startswith("round ")] == [
        ["round", "1/2"], ["round", "2/2"]]


@pytest.mark.parametrize("command", [["run", "--rounds", "0"], ["sweep", "--rounds", "0"], ["runs"],
                                     ["report", "x", "--out", "r.html"], ["dashboard", "--port", "0"]])
def test_debug_shows_the_traceback_of_a_usage_error(command, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)  # ./runs/results.db is missing here
    monkeypatch.setattr(term_fl.dashboard, "serve", lambda db, **kw: pytest.fail("the dashboard started"))
    assert main(command) == 2
    assert "Traceback" not in capsys.readouterr().err
    assert main([*command, "--debug"]) == 2
    assert "Traceback" in capsys.readouterr().err


def test_dashboard_options_reach_the_server(store, monkeypatch, capsys):
    seen = []
    monkeypatch.delenv("TERM_FL_DASHBOARD_TOKEN", raising=False)
    monkeypatch.setattr(term_fl.dashboard, "serve", lambda db, **kw: seen.append({"db": db, **kw}))
    assert main(["dashboard", "--db", str(store)]) == 0
    assert main(["dashboard", "--db", str(store), "--host", "0.0.0.0", "--port", "9001", "--access-log",
                 "--allowed-host", "example.org"]) == 0  # fmt: skip
    plain, given = seen
    assert plain == {"db": store, "host": "127.0.0.1", "port": 8050, "access_log": False, "allowed_hosts": [],
                     "token": None}  # fmt: skip
    assert (given["host"], given["port"], given["access_log"], given["allowed_hosts"]) == (
        "0.0.0.0", 9001, True, ["example.org"])
    assert given["token"] and given["token"] in capsys.readouterr().out  # another address asks for a token


def test_dashboard_on_a_missing_store_says_so_and_how_to_make_one_and_serves(tmp_path, capsys, monkeypatch):
    """Said on the terminal; served anyway (a deployment's dashboard container starts before its first run
    writes the store: exiting would make compose restart it in a loop)."""
    served = []
    monkeypatch.setattr(term_fl.dashboard, "serve", lambda db, **kw: served.append(db))
    missing = tmp_path / "none.db"
    assert main(["dashboard", "--db", str(missing)]) == 0
    err = capsys.readouterr().err
    assert f"no results store at {missing} yet" in err and f"term-fl run --db {missing}" in err
    assert served == [missing] and not missing.exists()  # nothing made: the dashboard only reads


def test_report_writes_the_subject_to_out(store, tmp_path):
    run_id = json.loads((store.parent / "run" / "summary.json").read_text())["run_id"]
    assert main(["report", "default", "--out", str(tmp_path / "s.html"), "--db", str(store)]) == 0
    assert main(["report", run_id, "--out", str(tmp_path / "r.html"), "--db", str(store)]) == 0
    scenario, run = (tmp_path / "s.html").read_text(), (tmp_path / "r.html").read_text()
    assert "Comparison: scenario default" in scenario and "Comparison: scenario default" not in run
    assert run_id in run


@pytest.mark.parametrize("argv, expected", [
    ([], 3),
    (["--scenario", "other"], 0),
    (["--strategy", "fedavg"], 1),
    (["--status", "failed"], 0),
    (["--limit", "2"], 2),
])  # fmt: skip
def test_runs_filters_change_the_listed_runs(store, argv, expected, capsys):
    assert main(["runs", "--db", str(store), "--format", "json", *argv]) == 0
    assert len(json.loads(capsys.readouterr().out)) == expected


def test_runs_format_changes_the_output(store, capsys):
    outputs = []
    for fmt in ("table", "json", "csv"):
        assert main(["runs", "--db", str(store), "--format", fmt]) == 0
        outputs.append(capsys.readouterr().out)
    table, listed, csv_text = outputs
    assert "runs in" in table and json.loads(listed) and csv_text.startswith("run_id,")


@pytest.mark.parametrize("command", [[], *([name] for name in CHECKED)])
def test_help_is_plain_text(command, capsys):
    """No reST markup (``double backticks``) in what --help prints."""
    with pytest.raises(SystemExit):
        main([*command, "--help"])
    out = capsys.readouterr().out
    assert "usage: term-fl" in out and "``" not in out


def test_resume_takes_only_the_store_and_says_what_else_was_given(tmp_path, capsys):
    """--resume goes on with the run's own settings: a scenario option beside it is refused, naming both."""
    assert main(["run", "--resume", "some-run", "--seed", "3", "--db", str(tmp_path / "r.db")]) == 2
    err = capsys.readouterr().err
    assert "--resume some-run" in err and "--seed" in err
