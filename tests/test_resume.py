"""``term-fl run --resume RUN_ID``: a stopped run goes on from its checkpoint to the numbers of an uninterrupted run.

Each case runs a scenario uninterrupted, runs it again stopped after a round
(KeyboardInterrupt from the progress callback, as Ctrl-C or SIGTERM raise it
in the server loop), resumes it, and compares the final model bit for bit,
the summary's statistics and every stored row with the uninterrupted run.
"""

from __future__ import annotations

import json
import sqlite3
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from conftest import small_scenario
from term_fl.cli.commands import main
from term_fl.common.locks import FolderLock
from term_fl.results import ResultsStore
from term_fl.runs.checkpoint import CHECKPOINT_FILE, load_checkpoint
from term_fl.runs.resume import resume_run
from term_fl.runs.run import run_one

from test_bad_inputs import assert_usage_error

SUMMARY_KEYS = ("test", "validation", "tilted_weights", "running_estimate", "mixture_weights", "convergence",
                "rounds_completed", "status", "evaluated_round")


def stopping_after(server_round: int):
    """An on_round callback that interrupts the run once ``server_round`` is recorded (as Ctrl-C does)."""

    def stop(record, rounds):
        if record.server_round == server_round:
            raise KeyboardInterrupt

    return stop


def interrupted_run(scenario, store: ResultsStore, out: Path, after: int) -> str:
    with pytest.raises(KeyboardInterrupt):
        run_one(scenario, store, out_dir=out, on_round=stopping_after(after))
    run = store.list_runs()[0]
    assert (run.status, run.rounds_completed) == ("interrupted", after)
    return run.run_id


def stored_rows(store: ResultsStore, run_id: str) -> dict:
    """Every per-device row and per-round record of a run, for comparison."""
    rows = {f"eval {split}": store.load_metrics(run_id, split) for split in ("val", "test")}
    rows["train"] = store.load_train(run_id)
    rows["rounds"] = [{k: v for k, v in r.items() if k != "duration_s"} for r in store.load_rounds(run_id)]
    return rows


def assert_same_run(store: ResultsStore, full_id: str, full_dir: Path, resumed_id: str, resumed_dir: Path) -> None:
    a, b = torch.load(full_dir / "model.pt"), torch.load(resumed_dir / "model.pt")
    assert list(a) == list(b) and all(torch.equal(a[k], b[k]) and a[k].dtype == b[k].dtype for k in a)
    sa, sb = (json.loads((d / "summary.json").read_text()) for d in (full_dir, resumed_dir))
    assert {k: sa.get(k) for k in SUMMARY_KEYS} == {k: sb.get(k) for k in SUMMARY_KEYS}
    ra, rb = stored_rows(store, full_id), stored_rows(store, resumed_id)
    assert ra["rounds"] == rb["rounds"]
    for key in ("eval val", "eval test", "train"):
        assert ra[key].keys() == rb[key].keys()
        for column in ra[key]:
            np.testing.assert_array_equal(ra[key][column], rb[key][column], err_msg=f"{key} {column}")
    run = store.get_run(resumed_id)
    assert (run.status, run.rounds_completed, run.error) == ("finished", run.rounds_planned, None)
    assert not (resumed_dir / CHECKPOINT_FILE).exists()  # model.pt holds the final model


CASES = [
    # (executor, strategy settings): TERM with lam < 1 carries Rt over rounds, AFL its mixture weights
    ("sequential", ["strategy.name=term", "strategy.term.lam=0.5"]),
    ("cohort", ["strategy.name=term", "strategy.term.lam=0.5"]),
    ("compiled", ["strategy.name=term", "strategy.term.lam=0.5"]),
    ("sequential", ["strategy.name=afl"]),
    ("cohort", ["strategy.name=afl"]),
]


@pytest.mark.parametrize(("executor", "settings"), CASES, ids=[f"{e}-{s[0][14:]}" for e, s in CASES])
def test_a_resumed_run_ends_with_the_numbers_of_an_uninterrupted_run(executor, settings, tmp_path):
    scenario = small_scenario("run.engine=inprocess", f"run.executor={executor}", "run.rounds=6",
                              "run.checkpoint_every=2", "run.evaluate_every=2", *settings)
    store = ResultsStore(tmp_path / "r.db")
    full = run_one(scenario, store, out_dir=tmp_path / "full")
    stopped = interrupted_run(scenario, store, tmp_path / "cut", after=5)
    checkpoint, _ = load_checkpoint(tmp_path / "cut")
    assert checkpoint.server_round == 4  # every 2nd round: round 5 runs again
    resume_run(store, stopped)
    assert_same_run(store, full.run_id, tmp_path / "full", stopped, tmp_path / "cut")


def test_the_checkpoint_holds_the_strategy_state_of_its_round(tmp_path):
    """The state after round k is what round k + 1 starts from: TERM's Rt as the round's diagnostic recorded it."""
    scenario = small_scenario("run.engine=inprocess", "strategy.term.lam=0.5", "run.rounds=3")
    store = ResultsStore(tmp_path / "r.db")
    stopped = interrupted_run(scenario, store, tmp_path / "cut", after=2)
    checkpoint, meta = load_checkpoint(tmp_path / "cut")
    recorded = store.load_rounds(stopped)[1]["diagnostics"]["running_estimate"]
    assert (checkpoint.server_round, checkpoint.strategy_state, meta["run_id"]) == (2, recorded, stopped)


def test_resume_on_the_command_line_finishes_the_run_and_exits_0(tmp_path, capsys):
    scenario = small_scenario("run.engine=inprocess", "run.rounds=4")
    db = tmp_path / "r.db"
    with ResultsStore(db) as store:
        full = run_one(scenario, store, out_dir=tmp_path / "full")
        stopped = interrupted_run(scenario, store, tmp_path / "cut", after=3)
    capsys.readouterr()
    assert main(["run", "--resume", stopped, "--db", str(db)]) == 0
    out = capsys.readouterr().out
    assert f"resuming run {stopped} after round 3 of 4" in out and f"run {stopped} (term) finished" in out
    with ResultsStore(db) as store:
        assert_same_run(store, full.run_id, tmp_path / "full", stopped, tmp_path / "cut")


def test_a_lost_run_resumes_and_a_run_without_checkpoint_starts_again(tmp_path):
    """A run killed mid-round (status running, stale heartbeat, no summary.json) resumes from its checkpoint; one
    killed before its first checkpoint runs again from round 1, into the same run id."""
    scenario = small_scenario("run.engine=inprocess", "run.rounds=4", "run.checkpoint_every=3")
    store = ResultsStore(tmp_path / "r.db")
    full = run_one(scenario, store, out_dir=tmp_path / "full")
    for out, after in ((tmp_path / "lost", 4), (tmp_path / "early", 2)):
        stopped = interrupted_run(scenario, store, out, after=after)
        with sqlite3.connect(tmp_path / "r.db") as db:  # what SIGKILL leaves: running, heartbeat stopped
            db.execute("UPDATE runs SET status = 'running', finished_at = NULL, summary_json = NULL, "
                       "heartbeat_at = 0 WHERE run_id = ?", (stopped,))
        (out / "summary.json").unlink()
        if after == 2:  # never reached its first checkpoint (round 3)
            assert load_checkpoint(out) is None
        assert store.get_run(stopped).status == "lost"
        resume_run(store, stopped)
        assert_same_run(store, full.run_id, tmp_path / "full", stopped, out)


def _finished(p: Path) -> tuple[Path, str]:
    db = p / "r.db"
    with ResultsStore(db) as store:
        run_id = run_one(small_scenario("run.engine=inprocess", "run.rounds=1"), store, out_dir=p / "done").run_id
    return db, run_id


def _interrupted(p: Path, after: int = 1) -> tuple[Path, str]:
    db = p / "r.db"
    with ResultsStore(db) as store:
        run_id = interrupted_run(small_scenario("run.engine=inprocess", "run.rounds=3"), store, p / "cut", after)
    return db, run_id


def _damaged_checkpoint(p: Path) -> tuple[Path, str]:
    db, run_id = _interrupted(p)
    (p / "cut" / CHECKPOINT_FILE).write_bytes(b"not a checkpoint")
    return db, run_id


def _checkpoint_of_another_run(p: Path) -> tuple[Path, str]:
    db, run_id = _interrupted(p)
    _, other = _interrupted(p / "other")
    (p / "other" / "cut" / CHECKPOINT_FILE).replace(p / "cut" / CHECKPOINT_FILE)
    return db, run_id


def _running_elsewhere(p: Path) -> tuple[Path, str]:
    """Recorded as running with a fresh heartbeat, its folder held by no process here (another machine's)."""
    db, run_id = _interrupted(p)
    with sqlite3.connect(db) as conn:
        conn.execute("UPDATE runs SET status = 'running', finished_at = NULL, heartbeat_at = ? WHERE run_id = ?",
                     (time.time(), run_id))
    return db, run_id


def _folder_gone(p: Path) -> tuple[Path, str]:
    db, run_id = _interrupted(p)
    (p / "cut").rename(p / "moved")
    return db, run_id


# (id, make(tmp_path) -> (db, run id), extra arguments, words the one-line message must hold)
REFUSED = [
    ("finished", _finished, [], ["finished; there is nothing to resume"]),
    ("unknown-run", lambda p: (_finished(p)[0], "nope"), [], ["no run 'nope'"]),
    ("no-store", lambda p: (p / "none.db", "x"), [], ["no results database at", "none.db"]),
    ("with-set", _interrupted, ["--set", "run.rounds=9"], ["its own settings", "leave out --set"]),
    ("with-config-and-out", _interrupted, ["configs/fairness.toml", "--out", "x"], ["leave out CONFIG, --out"]),
    ("damaged-checkpoint", _damaged_checkpoint, [], ["checkpoint.npz", "not a readable term-fl checkpoint"]),
    ("checkpoint-of-another-run", _checkpoint_of_another_run, [], ["the checkpoint in", "is of another run"]),
    ("folder-gone", _folder_gone, [], ["its folder", "is gone"]),
    ("running-elsewhere", _running_elsewhere, [], ["is running (its heartbeat is fresh)", "shown as lost 60 s after"]),
]


@pytest.mark.parametrize(("make", "extra", "words"), [c[1:] for c in REFUSED], ids=[c[0] for c in REFUSED])
def test_what_cannot_be_resumed_exits_2_naming_why(make, extra, words, tmp_path, capsys):
    db, run_id = make(tmp_path)
    before = runs_in(db)
    capsys.readouterr()
    code = main(["run", "--resume", run_id, *extra, "--db", str(db)])
    assert_usage_error(code, capsys.readouterr().err, words)
    assert runs_in(db) == before  # nothing recorded


def runs_in(db: Path) -> list[tuple] | None:
    if not db.exists():
        return None
    with ResultsStore.open_readonly(db) as store:
        return [(r.run_id, r.status, r.rounds_completed, r.heartbeat_at, r.finished_at) for r in store.list_runs()]


def test_a_run_that_a_live_process_holds_is_not_resumed(tmp_path, capsys):
    import os

    db, run_id = _interrupted(tmp_path)
    with FolderLock(tmp_path / "cut"):  # as the process that still runs it
        assert main(["run", "--resume", run_id, "--db", str(db)]) == 2
    assert_usage_error(2, capsys.readouterr().err, [f"run {run_id!r} is running: pid {os.getpid()}", "holds its folder"])


@pytest.mark.slow
def test_a_flower_engine_run_resumes_on_its_engine_to_the_numbers_of_an_uninterrupted_run(tmp_path):
    """The Simulation Engine (Ray): stopped after round 2 of 3, resumed with its stored engine, equal in every row."""
    scenario = small_scenario("run.engine=flower", "strategy.term.lam=0.5")
    store = ResultsStore(tmp_path / "r.db")
    full = run_one(scenario, store, out_dir=tmp_path / "full")
    stopped = interrupted_run(scenario, store, tmp_path / "cut", after=2)
    assert store.get_run(stopped).engine == "flower"
    resume_run(store, stopped)
    assert_same_run(store, full.run_id, tmp_path / "full", stopped, tmp_path / "cut")
