"""A run's end is all or nothing: a full disk while it writes model.pt or summary.json, or a store that fills up
during the run, leaves the run recorded as ``failed`` with the reason, no temporary file, and exit status 1.

The full disk is real: the temporary file a run writes is made a link to
``/dev/full``, whose every write fails with ENOSPC; the full store is SQLite's
own ``max_page_count`` reached.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import SMALL, small_scenario
from term_fl.cli.commands import main
from term_fl.results import ResultsStore
from term_fl.runs.checkpoint import CHECKPOINT_FILE
from term_fl.runs.resume import resume_run
from term_fl.runs.run import RunFailed, run_one

from test_resume import assert_same_run

SMALL_ARGS = [arg for item in SMALL for arg in ("--set", item)]
DEV_FULL = Path("/dev/full")
pytestmark = pytest.mark.skipif(not DEV_FULL.exists(), reason="needs /dev/full (Linux)")


def full_disk_for(run_dir: Path, name: str) -> None:
    """Every write of ``name``'s temporary file fails with ENOSPC (No space left on device)."""
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / f".{name}.tmp").symlink_to(DEV_FULL)


@pytest.mark.parametrize("name", ["model.pt", "summary.json"])
def test_a_full_disk_at_the_end_fails_the_run_with_the_reason_and_leaves_no_file_behind(name, tmp_path):
    scenario = small_scenario("run.engine=inprocess")
    out = tmp_path / "run"
    full_disk_for(out, name)
    with ResultsStore(tmp_path / "r.db") as store:
        with pytest.raises(RunFailed, match=f"cannot write the run's files: {name}: No space left on device"):
            run_one(scenario, store, out_dir=out)
        run = store.list_runs()[0]
        assert (run.status, run.rounds_completed) == ("failed", 3)
        assert run.error == f"cannot write the run's files: {name}: No space left on device"
    # no temporary file, no model.pt beside a failed run; the checkpoint of the last round stays
    assert sorted(p.name for p in out.iterdir()) == sorted(["config.json", CHECKPOINT_FILE, "summary.json"])
    assert json.loads((out / "summary.json").read_text())["status"] == "failed"


def test_a_run_failed_at_its_end_resumes_to_the_numbers_of_a_run_that_was_not(tmp_path):
    """Free the disk, resume: the checkpoint of the last round gives the model and summary the run would have had."""
    scenario = small_scenario("run.engine=inprocess")
    store = ResultsStore(tmp_path / "r.db")
    full = run_one(scenario, store, out_dir=tmp_path / "full")
    full_disk_for(tmp_path / "cut", "model.pt")
    with pytest.raises(RunFailed):
        run_one(scenario, store, out_dir=tmp_path / "cut")
    assert not os.path.lexists(tmp_path / "cut" / ".model.pt.tmp")  # removed with the failed write: space again
    failed = store.list_runs(status="failed")[0].run_id
    resume_run(store, failed)
    assert_same_run(store, full.run_id, tmp_path / "full", failed, tmp_path / "cut")


def test_the_command_exits_1_with_one_line_when_the_disk_is_full(tmp_path):
    """End to end: the installed command, one line on stderr (no traceback), the store row failed."""
    out = tmp_path / "run"
    full_disk_for(out, "model.pt")
    proc = subprocess.run([sys.executable, "-m", "term_fl", "run", "--engine", "inprocess", *SMALL_ARGS,
                           "--out", str(out), "--db", str(tmp_path / "r.db")],
                          capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 1, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert lines[0].startswith("term-fl: the run failed: cannot write the run's files: model.pt: No space left")
    with ResultsStore.open_readonly(tmp_path / "r.db") as store:
        assert store.list_runs()[0].status == "failed"


def test_a_store_that_fills_up_during_a_run_exits_1_and_records_the_run_as_failed(tmp_path, capsys, monkeypatch):
    """Not bad input (2): the run started, was recorded, and failed when a round found no room in the store."""
    record_round = ResultsStore.record_round

    def fill_up(store, run_id, round, **rows):
        if round == 2:  # from now on the file may not grow: SQLite's "database or disk is full" once a page is due
            pages = store._conn.execute("PRAGMA page_count").fetchone()[0]
            store._conn.execute(f"PRAGMA max_page_count = {pages}")
        return record_round(store, run_id, round, **rows)

    monkeypatch.setattr(ResultsStore, "record_round", fill_up)
    code = main(["run", "--engine", "inprocess", *SMALL_ARGS, "--set", "run.rounds=5", "--out", str(tmp_path / "o"),
                 "--db", str(tmp_path / "r.db")])
    err = capsys.readouterr().err
    assert code == 1, err
    assert len(err.strip().splitlines()) == 1 and "database or disk is full" in err and "Traceback" not in err
    monkeypatch.undo()
    with ResultsStore.open_readonly(tmp_path / "r.db") as store:
        run = store.list_runs()[0]
    assert run.status == "failed" and 1 <= run.rounds_completed < 5 and "database or disk is full" in run.error


def test_no_temporary_file_is_left_when_a_checkpoint_cannot_be_written(tmp_path):
    """A full disk during the run: the checkpoint's temporary file goes, the run fails with the reason."""
    scenario = small_scenario("run.engine=inprocess")
    out = tmp_path / "run"
    full_disk_for(out, CHECKPOINT_FILE)
    with ResultsStore(tmp_path / "r.db") as store, pytest.raises(RunFailed, match="No space left on device"):
        run_one(scenario, store, out_dir=out)
    assert not os.path.lexists(out / f".{CHECKPOINT_FILE}.tmp")
    with ResultsStore.open_readonly(tmp_path / "r.db") as store:
        assert store.list_runs()[0].status == "failed"


@pytest.mark.parametrize("where", ["the run's files: model.pt", "the results store"], ids=["model.pt", "store-row"])
def test_a_signal_while_the_end_is_written_records_the_run_interrupted_and_it_resumes(where, tmp_path, monkeypatch):
    """SIGTERM (an ``Interrupted``) during the final writes: no half-written file, no row left ``running``; the
    run is ``interrupted`` with where it stopped, and resuming it gives the numbers of a run that was not."""
    from term_fl.common.errors import Interrupted

    scenario = small_scenario("run.engine=inprocess")
    store = ResultsStore(tmp_path / "r.db")
    full = run_one(scenario, store, out_dir=tmp_path / "full")
    finish_run = ResultsStore.finish_run

    def signalled(*args, **kwargs):
        raise Interrupted(15)

    def finish_signalled(self, run_id, status="finished", summary=None, error=None):
        if status == "finished":
            raise Interrupted(15)
        return finish_run(self, run_id, status, summary, error)

    if where.endswith("model.pt"):
        monkeypatch.setattr("term_fl.runs.run.save_model", signalled)
    else:
        monkeypatch.setattr(ResultsStore, "finish_run", finish_signalled)
    with pytest.raises(Interrupted):
        run_one(scenario, store, out_dir=tmp_path / "cut")
    monkeypatch.undo()
    run = store.list_runs()[0]
    assert (run.status, run.rounds_completed) == ("interrupted", 3)
    assert run.error == f"interrupted by SIGTERM while writing {where}"
    assert sorted(p.name for p in (tmp_path / "cut").iterdir()) == sorted(["config.json", CHECKPOINT_FILE,
                                                                            "summary.json"])
    resume_run(store, run.run_id)
    assert_same_run(store, full.run_id, tmp_path / "full", run.run_id, tmp_path / "cut")
