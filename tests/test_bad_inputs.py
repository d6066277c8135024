"""Every bad input a user can give ends with one message naming the file, key or value, exit status 2.

Table-driven: the cases of the reliability probe (issue 13): scenario files and
``--set`` values, data files, store and output paths. Each case runs
``term-fl`` in-process and checks the exit status, that the message names what
is wrong, that no traceback is printed, and that nothing was recorded. One
case runs the real command in a subprocess to check the same end to end.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from conftest import SMALL
from term_fl.cli.commands import main

SMALL_ARGS = [arg for item in SMALL for arg in ("--set", item)]


def vehicle_file(tmp_path: Path, mutate=None, *, text: str | bytes | None = None) -> Path:
    """A small valid vehicle file (3 devices x 12 samples, 100 features), optionally broken by ``mutate``."""
    path = tmp_path / "vehicle.json"
    if text is not None:
        path.write_bytes(text if isinstance(text, bytes) else text.encode())
        return path
    rng = np.random.default_rng(0)
    users = ["f_0", "f_1", "f_2"]
    content = {
        "users": users,
        "num_samples": [12, 12, 12],
        "user_data": {u: {"x": rng.normal(size=(12, 100)).round(3).tolist(),
                          "y": [[1.0] if i % 2 else [-1.0] for i in range(12)]} for u in users},
    }
    if mutate is not None:
        mutate(content)
    path.write_text(json.dumps(content))
    return path


def _set_x(value):
    def mutate(c):
        c["user_data"]["f_1"]["x"][4][7] = value
    return mutate


def _set_label(c):
    c["user_data"]["f_0"]["y"][3] = [2]


def _empty_device(c):
    c["user_data"]["f_2"] = {"x": [], "y": []}
    c["num_samples"][2] = 0


def _wrong_schema(c):
    del c["user_data"]


# These files are not the published vehicle_fewshot.json: accepted knowingly (data.sha256=any),
# so that the problem each case plants is the one reported.
VEHICLE = ["--set", "data.name=vehicle", "--set", "data.sha256=any", "--set", "run.clients_per_round=2",
           "--set", "run.rounds=1"]

# (id, extra args builder(tmp_path) -> args, words the message must contain)
SCENARIO_CASES = [
    ("t-too-large", lambda p: ["--set", "strategy.t=5000"], ["strategy.term.t", "less than or equal to 1000"]),
    ("unknown-key", lambda p: ["--set", "strategy.tt=1"], ["strategy.tt", "unknown key", "allowed"]),
    ("bad-override", lambda p: ["--set", "nonsense"], ["nonsense", "KEY=VALUE"]),
    ("rounds-true", lambda p: ["--set", "run.rounds=true"], ["run.rounds", "boolean"]),
    ("t-true", lambda p: ["--set", "strategy.t=true"], ["strategy.term.t", "boolean"]),
    ("noisy-devices-bool", lambda p: ["--set", "data.noisy_devices=[true]"], ["data.noisy_devices", "boolean"]),
    ("clients-per-round-above-devices", lambda p: ["--set", "run.clients_per_round=500"],
     ["run.clients_per_round = 500", "6 devices", "1..6"]),
    ("name-escapes-runs", lambda p: ["--set", "name=../../escape"], ["name", "'../../escape'", "letters, digits"]),
    ("name-with-slash", lambda p: ["--set", "name=a/b"], ["name", "'a/b'"]),
    ("name-300-chars", lambda p: ["--set", "name=" + "n" * 300], ["name", "1 to 64"]),
    ("noisy-device-out-of-range", lambda p: ["--set", "data.noise=flip_labels", "--set", "data.noisy_devices=[500]"],
     ["data.noisy_devices [500]", "0..5"]),
    ("num-noisy-above-devices", lambda p: ["--set", "data.noise=flip_labels", "--set", "data.num_noisy=1000"],
     ["data.num_noisy", "0..6", "1000"]),
    ("cuda-without-cuda", lambda p: ["--set", "client.device=cuda"], ["client.device = 'cuda'", "cpu"]),
    ("cuda-index-without-cuda", lambda p: ["--set", "client.device=cuda:3"], ["client.device = 'cuda:3'"]),
    ("gpus-without-cuda", lambda p: ["--engine", "flower", "--set", "resources.num_gpus=1"],
     ["resources.num_gpus = 1", "no CUDA GPU"]),
    ("deeply-nested-override", lambda p: ["--set", "strategy.t=" + "[" * 5000 + "]" * 5000], ["nested too deeply"]),
    ("missing-scenario-file", lambda p: [str(p / "nope.toml")], ["nope.toml", "does not exist"]),
    ("binary-scenario-file", lambda p: [str(_write(p / "s.toml", bytes(range(256)) * 4))],
     ["s.toml", "not a text file"]),
    ("deeply-nested-scenario-file", lambda p: [str(_write(p / "s.toml", "a = " + "[" * 5000 + "]" * 5000))],
     ["s.toml", "nested too deeply"]),
    ("invalid-toml", lambda p: [str(_write(p / "s.toml", "[run\nrounds = 1"))], ["s.toml", "not valid TOML"]),
    ("vehicle-missing", lambda p: [*VEHICLE, "--set", f"data.path={p / 'none.json'}"], ["none.json", "does not exist"]),
    ("vehicle-truncated", lambda p: [*VEHICLE, "--set", "data.path=" + str(vehicle_file(p, text='{"users": ['))],
     ["vehicle.json", "not a valid JSON file"]),
    ("vehicle-binary", lambda p: [*VEHICLE, "--set", f"data.path={vehicle_file(p, text=bytes(range(256)))}"],
     ["vehicle.json", "not a valid JSON file"]),
    ("vehicle-deeply-nested", lambda p: [*VEHICLE, "--set",
                                         f"data.path={vehicle_file(p, text='[' * 100000 + ']' * 100000)}"],
     ["vehicle.json", "nested too deeply"]),
    ("vehicle-wrong-schema", lambda p: [*VEHICLE, "--set", f"data.path={vehicle_file(p, _wrong_schema)}"],
     ["vehicle.json", "missing key 'user_data'"]),
    ("vehicle-nan-feature", lambda p: [*VEHICLE, "--set", f"data.path={vehicle_file(p, _set_x(float('nan')))}"],
     ["vehicle.json", "device 1 ('f_1')", "finite"]),
    ("vehicle-float32-overflow", lambda p: [*VEHICLE, "--set", f"data.path={vehicle_file(p, _set_x(1e39))}"],
     ["vehicle.json", "device 1 ('f_1')", "sample 4, feature 7", "1e+39", "overflows float32"]),
    ("vehicle-bad-label", lambda p: [*VEHICLE, "--set", f"data.path={vehicle_file(p, _set_label)}"],
     ["vehicle.json", "device 0 ('f_0')", "label [2]", "-1 or +1"]),
    ("vehicle-empty-device", lambda p: [*VEHICLE, "--set", f"data.path={vehicle_file(p, _empty_device)}"],
     ["vehicle.json", "device 2 ('f_2')", "no samples"]),
    ("vehicle-clients-per-round-above-devices",
     lambda p: [*VEHICLE, "--set", "run.clients_per_round=10", "--set", f"data.path={vehicle_file(p)}"],
     ["run.clients_per_round = 10", "3 devices"]),
    ("vehicle-not-the-published-file",
     lambda p: ["--set", "data.name=vehicle", "--set", f"data.path={vehicle_file(p)}"],
     ["data.vehicle.sha256", "vehicle.json", "sha256 mismatch", "a8c8b22a89ea64e5", "data.sha256="]),
    ("vehicle-sha256-not-hex", lambda p: ["--set", "data.name=vehicle", "--set", "data.sha256=abc"],
     ["data.vehicle.sha256", "abc"]),
    # a flat key set by --set must be a setting of the chosen strategy, dataset or model (a file's is a default)
    ("t-for-qffl", lambda p: ["--set", "strategy.name=qffl", "--set", "strategy.t=2"],
     ["strategy.t", "the strategy qffl has no setting 't'", "qffl's settings: q, loss_reduction",
      "clip_loss, max_update_norm", "strategy.term.t"]),
    ("q-for-term", lambda p: ["--set", "strategy.q=2"], ["strategy.q", "the strategy term has no setting 'q'",
                                                          "strategy.qffl.q"]),
    ("alpha-for-vehicle", lambda p: [*VEHICLE, "--set", "data.alpha=2"],
     ["data.alpha", "the dataset vehicle has no setting 'alpha'", "vehicle's settings: path, sha256",
      "data.synthetic.alpha"]),
    ("l2-for-logreg", lambda p: ["--set", "model.l2=0.5"],
     ["model.l2", "the model logreg has no setting 'l2'", "logreg's settings: none", "model.linear_svm.l2"]),
    ("unknown-key-of-a-sub-table", lambda p: ["--set", "strategy.qffl.t=2"],
     ["strategy.qffl.t", "unknown key", "allowed in [strategy.qffl]: q, loss_reduction"]),
    ("sub-table-is-a-table", lambda p: ["--set", "strategy.term=2"], ["strategy.term", "valid dictionary"]),
    ("reference-unknown", lambda p: ["--set", "run.reference=fedprox"], ["run.reference", "'fedavg'", "fedprox"]),
    ("reference-twice", lambda p: ["--set", 'run.reference=["fedavg", "qffl", "fedavg"]'],
     ["run.reference", "fedavg more than once"]),
    # issue 22: values every client reads, and data that must stay finite and fit in memory
    ("node-timeout-inf", lambda p: ["--set", "run.node_timeout=inf"], ["run.node_timeout", "finite number"]),
    ("round-timeout-inf", lambda p: ["--set", "run.round_timeout=inf"], ["run.round_timeout", "finite number"]),
    ("round-timeout-beyond-a-week", lambda p: ["--set", "run.round_timeout=1e300"],
     ["run.round_timeout", "less than or equal to 604800"]),
    ("noise-scale-inf", lambda p: ["--set", "data.noise=scale_features", "--set", "data.num_noisy=1",
                                   "--set", "data.noise_scale=inf"], ["data.noise_scale", "finite number"]),
    ("noise-scale-1e300", lambda p: ["--set", "data.noise=scale_features", "--set", "data.num_noisy=1",
                                     "--set", "data.noise_scale=1e300"],
     ["data.noise_scale", "less than or equal to 1000000"]),
    ("a-million-synthetic-devices", lambda p: ["--set", "data.synthetic.num_devices=1000000"],
     ["data.synthetic.num_devices = 1000000", "data.synthetic.samples_per_device = 150", "about 37.2 GB",
      "data.size_limit_gb = 4", "raise data.size_limit_gb"]),
    ("uncapped-devices-over-a-lowered-limit", lambda p: ["--set", "data.synthetic.max_samples=1000000",
                                                        "--set", "data.size_limit_gb=0.0001"],
     ["data.synthetic.max_samples = 1000000", "about 0.0 GB", "data.size_limit_gb = 0.0001"]),
    ("checkpoint-every-0", lambda p: ["--set", "run.checkpoint_every=0"], ["run.checkpoint_every", "greater than"]),
]


def _write(path: Path, content: str | bytes) -> Path:
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    return path


def assert_usage_error(code: int, err: str, words: list[str]) -> None:
    assert code == 2, err
    assert err.startswith("term-fl: error: "), err
    assert len(err.strip().splitlines()) == 1, err  # one line
    assert "Traceback" not in err
    for word in words:
        assert word in err, f"{word!r} not in {err!r}"


@pytest.mark.parametrize(("make_args", "words"), [c[1:] for c in SCENARIO_CASES], ids=[c[0] for c in SCENARIO_CASES])
def test_bad_scenario_and_data_inputs_exit_2_naming_the_problem(make_args, words, tmp_path, capsys):
    db = tmp_path / "r.db"
    code = main(["run", "--engine", "inprocess", *SMALL_ARGS, *make_args(tmp_path), "--db", str(db),
                 "--out", str(tmp_path / "out")])
    assert_usage_error(code, capsys.readouterr().err, words)
    assert not (tmp_path / "out").exists()  # nothing started
    if db.exists():  # the store may be created; no run is recorded in it
        from term_fl.results import ResultsStore

        assert ResultsStore.open_readonly(db).list_runs() == []


def _finished_run(tmp_path: Path) -> Path:
    out = tmp_path / "first"
    assert main(["run", "--engine", "inprocess", *SMALL_ARGS, "--set", "run.rounds=1",
                 "--out", str(out), "--db", str(tmp_path / "r.db")]) == 0
    return out


PATH_CASES = [
    ("db-is-a-directory", lambda p: ["run", "--db", str(p)], ["--db", "is a directory"]),
    ("db-under-a-file", lambda p: ["run", "--db", str(_write(p / "f", "x") / "r.db")], ["f/r.db", "cannot open the results database"]),
    ("db-not-creatable", lambda p: ["run", "--db", "/proc/term-fl-probe.db"],
     ["/proc/term-fl-probe.db", "cannot open the results database"]),
    ("db-not-sqlite", lambda p: ["runs", "--db", str(_write(p / "x.db", "hello" * 1000))],
     ["x.db", "not a term-fl results database"]),
    ("db-missing", lambda p: ["runs", "--db", str(p / "missing.db")], ["missing.db", "does not exist"]),
    ("out-is-a-file", lambda p: ["run", "--out", str(_write(p / "file", "x"))], ["--out", "is a file"]),
    ("out-name-too-long", lambda p: ["run", "--out", str(p / ("o" * 300))], ["o" * 300, "File name too long"]),
    ("out-reused", lambda p: ["run", "--out", str(_finished_run(p))], ["first", "already holds the files of run"]),
    ("report-out-is-a-directory", lambda p: ["report", "x", "--out", str(p), "--db", str(p / "r.db")],
     ["--out", "is a directory"]),
    ("report-unknown-run", lambda p: ["report", "nope", "--out", str(p / "r.html"), "--db", str(_store(p))],
     ["'nope' is neither a run id nor a scenario"]),
    ("sweep-without-sweep", lambda p: ["sweep", str(_write(p / "s.toml", "[run]\nrounds = 1\n")), "--db",
                                        str(p / "r.db")], ["no [sweep] table"]),
    # issue 22: paths and numbers of the command line
    ("out-empty", lambda p: ["run", "--out", ""], ["--out ''", "empty"]),
    ("sweep-out-empty", lambda p: ["sweep", str(_write(p / "s.toml", '[sweep]\n"run.seed" = [0]\n')), "--out", ""],
     ["--out ''", "empty"]),
    ("db-dev-null", lambda p: ["run", "--db", "/dev/null"], ["--db /dev/null", "not a regular file",
                                                             "a character device"]),
    ("runs-db-dev-null", lambda p: ["runs", "--db", "/dev/null"], ["--db /dev/null", "not a regular file"]),
    ("runs-limit-beyond-64-bits", lambda p: ["runs", "--limit", "99999999999999999999", "--db", str(_store(p))],
     ["--limit 99999999999999999999", "allowed 0 (all runs) to 9223372036854775807"]),
    ("dashboard-port-99999", lambda p: ["dashboard", "--port", "99999", "--db", str(p / "r.db")],
     ["--port 99999", "allowed 1..65535"]),
    ("dashboard-port-negative", lambda p: ["dashboard", "--port", "-1", "--db", str(p / "r.db")],
     ["--port -1", "allowed 1..65535"]),
    ("dashboard-host-unresolvable", lambda p: ["dashboard", "--host", "no-such-host.invalid", "--db", str(p / "r.db")],
     ["--host no-such-host.invalid", "cannot be resolved"]),
    ("sweep-grid-of-ten-billion-cells", lambda p: ["sweep", str(_write(p / "s.toml", TEN_BILLION_CELLS))],
     ["10,000,000,000 cells", "10 values of run.seed x", "at most 10,000", "--max-cells N"]),
]

# Ten keys of ten values each: 10^10 cells, refused as they are counted (tests/test_bad_inputs.py times it)
TEN_BILLION_CELLS = "[sweep]\n" + "".join(f'"{key}" = {values}\n' for key, values in [
    ("run.seed", list(range(10))), ("strategy.term.server_lr", [0.1 * (i + 1) for i in range(10)]),
    ("client.lr", [0.01 * (i + 1) for i in range(10)]), ("client.epochs", list(range(1, 11))),
    ("run.max_failed_rounds", list(range(1, 11))), ("client.weight_decay", [0.001 * i for i in range(10)]),
    ("client.tau", [float(i) for i in range(10)]), ("strategy.term.lam", [0.1 * (i + 1) for i in range(10)]),
    ("data.noise_scale", [float(i + 1) for i in range(10)]), ("data.seed", list(range(10))),
])  # no key the tests' --set SMALL sets: a swept key given on the command line is an error of its own


SWEEP_CASES = [
    ("cell-sets-a-key-its-strategy-lacks",
     '[sweep]\ncells = [{ "strategy.name" = "fedavg" }, { "strategy.name" = "qffl", "strategy.t" = 2 }]\n',
     ["strategy.t", "the strategy qffl has no setting 't'", "strategy.term.t"]),
    ("cell-sets-a-key-its-model-lacks",
     '[sweep]\ncells = [{ "model.name" = "mlp", "model.l2" = 0.1 }]\n',
     ["model.l2", "the model mlp has no setting 'l2'", "mlp's settings: hidden"]),
]


@pytest.mark.parametrize(("text", "words"), [c[1:] for c in SWEEP_CASES], ids=[c[0] for c in SWEEP_CASES])
def test_bad_sweep_cells_exit_2_naming_the_key_and_the_strategy(text, words, tmp_path, capsys):
    """A grid key applies to the strategies that have it; a cell names its strategy, so a key it lacks is an error."""
    scenario = _write(tmp_path / "s.toml", text)
    code = main(["sweep", str(scenario), *SMALL_ARGS, "--db", str(tmp_path / "r.db"), "--out", str(tmp_path / "out")])
    assert_usage_error(code, capsys.readouterr().err, words)
    assert not list((tmp_path / "out").glob("*/summary.json"))  # no cell ran


def _store(p: Path) -> Path:
    from term_fl.results import ResultsStore

    ResultsStore(p / "r.db").close()
    return p / "r.db"


@pytest.mark.parametrize(("make_args", "words"), [c[1:] for c in PATH_CASES], ids=[c[0] for c in PATH_CASES])
def test_bad_store_and_output_paths_exit_2_naming_the_path(make_args, words, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)  # a run or sweep that wrongly went ahead writes here, not into the repository
    monkeypatch.setattr("uvicorn.run", lambda *a, **kw: pytest.fail("the dashboard started"))
    args = make_args(tmp_path)
    if args[0] in ("run", "sweep"):
        args = [*args, "--engine", "inprocess", *SMALL_ARGS]
        if "--db" not in args:
            args += ["--db", str(tmp_path / "r.db")]
    before = _runs_in(tmp_path / "r.db")
    capsys.readouterr()
    assert_usage_error(main(args), capsys.readouterr().err, words)
    assert _runs_in(tmp_path / "r.db") == before  # nothing recorded
    assert not (tmp_path / "runs").exists()


def _runs_in(db: Path) -> list[str]:
    from term_fl.results import ResultsStore

    return [r.run_id for r in ResultsStore.open_readonly(db).list_runs()] if db.is_file() else []


def test_a_dashboard_address_it_cannot_listen_at_exits_2_naming_it(tmp_path, capsys, monkeypatch):
    """An address of another machine (TEST-NET-1): said before the server starts, not in its log."""
    monkeypatch.setattr("uvicorn.run", lambda *a, **kw: pytest.fail("the dashboard started"))
    from term_fl.results import ResultsStore

    ResultsStore(tmp_path / "r.db").close()  # a store that exists: the address is what is wrong
    assert main(["dashboard", "--host", "192.0.2.1", "--db", str(tmp_path / "r.db")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("term-fl: error: --host 192.0.2.1 --port 8050: cannot listen there (Cannot assign")


@pytest.mark.parametrize("args", [
    lambda p: ["run", "--set", "data.synthetic.num_devices=1000000"],
    lambda p: ["sweep", str(_write(p / "s.toml", TEN_BILLION_CELLS))],
], ids=["a-million-devices", "ten-billion-cells"])
def test_sizes_are_refused_within_a_second_before_anything_is_made(args, tmp_path, capsys):
    """Estimated, not expanded or generated: the answer comes at once (it used to hang)."""
    argv = [*args(tmp_path), "--db", str(tmp_path / "r.db"), "--out", str(tmp_path / "out")]
    start = time.perf_counter()
    code = main(argv)
    elapsed = time.perf_counter() - start
    assert code == 2 and "GB" in capsys.readouterr().err if argv[0] == "run" else code == 2
    assert elapsed < 1.0, f"{elapsed:.2f} s"
    assert not (tmp_path / "out").exists()


def test_max_cells_lets_a_larger_grid_run(tmp_path, capsys):
    scenario = _write(tmp_path / "s.toml", '[sweep]\n"run.seed" = [0, 1]\n"client.lr" = [0.01, 0.02]\n')
    base = ["sweep", str(scenario), *SMALL_ARGS, "--set", "run.rounds=1", "--db", str(tmp_path / "r.db"),
            "--out", str(tmp_path / "out")]
    assert main([*base, "--max-cells", "3"]) == 2
    assert "the [sweep] grid has 4 cells (2 values of run.seed x 2 values of client.lr)" in capsys.readouterr().err
    assert main([*base, "--max-cells", "4"]) == 0


def test_reused_out_leaves_the_first_runs_files_as_they_were(tmp_path, capsys):
    out = _finished_run(tmp_path)
    before = {name: (out / name).read_bytes() for name in ("summary.json", "model.pt", "config.json")}
    assert main(["run", "--engine", "inprocess", *SMALL_ARGS, "--out", str(out), "--db", str(tmp_path / "r.db")]) == 2
    assert {name: (out / name).read_bytes() for name in before} == before


def test_debug_shows_the_traceback_of_a_usage_error(tmp_path, capsys):
    assert main(["run", "--debug", "--set", "run.rounds=true", "--db", str(tmp_path / "r.db")]) == 2
    err = capsys.readouterr().err
    assert "Traceback" in err and "run.rounds" in err


def test_the_installed_command_prints_one_message_and_no_traceback(tmp_path):
    """End to end, as a user runs it: a binary scenario file."""
    scenario = _write(tmp_path / "s.toml", bytes(range(256)))
    env = {**os.environ, "TERM_FL_DB": str(tmp_path / "r.db")}
    proc = subprocess.run([sys.executable, "-m", "term_fl", "run", str(scenario)], capture_output=True, text=True,
                          env=env, timeout=120, check=False)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        f"term-fl: error: scenario file {str(scenario)!r} is not a text file (not UTF-8 at byte 128); "
        "give a TOML scenario file"
    ]
