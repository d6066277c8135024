"""One process per output folder: a second copy of a sweep or run on the same folder names the first and exits 2.

The lock is ``flock`` on ``.term-fl.lock`` (the kernel drops it when its
process ends, however it ends); the file names the holder. A lock file that
a dead process left is taken over.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from conftest import SMALL
from term_fl.cli.commands import main
from term_fl.common.locks import LOCK_FILE, FolderInUse, FolderLock, holder_of

from test_bad_inputs import assert_usage_error
from test_signals import Started

SMALL_ARGS = [arg for item in SMALL for arg in ("--set", item)]

# Another process that holds a folder's lock until its stdin closes.
HOLDER = textwrap.dedent("""
    import sys
    from term_fl.common.locks import FolderLock
    with FolderLock(sys.argv[1]):
        print("held", flush=True)
        sys.stdin.read()
""")


@pytest.fixture
def held(tmp_path):
    """A folder whose lock another live process holds; that process's id."""
    folder = tmp_path / "held"
    folder.mkdir()
    proc = subprocess.Popen([sys.executable, "-c", HOLDER, str(folder)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline() == "held\n"
    yield folder, proc.pid
    proc.stdin.close()
    proc.wait(timeout=30)


def test_the_lock_names_its_holder_and_is_gone_once_released(tmp_path):
    lock = FolderLock(tmp_path, "the folder").acquire()
    holder = holder_of(tmp_path)
    assert (holder.pid, holder.command) == (os.getpid(), " ".join(sys.argv))
    with pytest.raises(FolderInUse, match=rf"the folder is in use by another term-fl process: pid {os.getpid()} on "):
        FolderLock(tmp_path, "the folder").acquire()  # a second lock, even in this process
    lock.release()
    assert holder_of(tmp_path) is None and not (tmp_path / LOCK_FILE).exists()


def test_a_lock_file_left_by_a_dead_process_is_taken_over(tmp_path):
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True,
                          check=True)
    (tmp_path / LOCK_FILE).write_text(json.dumps({"pid": int(dead.stdout), "host": "h", "since": 0, "command": "x"}))
    assert holder_of(tmp_path) is None  # nobody holds it: the kernel dropped the lock with its process
    with FolderLock(tmp_path):
        assert holder_of(tmp_path).pid == os.getpid()


def test_a_second_sweep_on_a_held_folder_exits_2_naming_the_holder(held, tmp_path, capsys):
    folder, pid = held
    sweep = tmp_path / "s.toml"
    sweep.write_text('[sweep]\n"run.seed" = [0, 1]\n')
    code = main(["sweep", str(sweep), *SMALL_ARGS, "--out", str(folder), "--db", str(tmp_path / "r.db")])
    assert_usage_error(code, capsys.readouterr().err, [f"the sweep folder {folder} is in use by another term-fl "
                                                       f"process: pid {pid} on host", "wait until it ends"])
    assert sorted(p.name for p in folder.iterdir()) == [LOCK_FILE]  # no cell started


def test_a_run_into_a_held_folder_exits_2_naming_the_holder(held, tmp_path, capsys):
    folder, pid = held
    code = main(["run", "--engine", "inprocess", *SMALL_ARGS, "--out", str(folder), "--db", str(tmp_path / "r.db")])
    assert_usage_error(code, capsys.readouterr().err, [f"--out {folder} is in use by another term-fl process: pid {pid}"])
    assert sorted(p.name for p in folder.iterdir()) == [LOCK_FILE]


@pytest.mark.slow
def test_the_same_sweep_started_twice_runs_once(tmp_path, capsys):
    """The second copy exits 2 naming the first; the first finishes every cell once, in folders nobody moved."""
    sweep = tmp_path / "s.toml"
    sweep.write_text('[sweep]\n"run.seed" = [0, 1, 2]\n')
    args = ["sweep", str(sweep), *SMALL_ARGS, "--set", "run.rounds=40", "--out", str(tmp_path / "out"),
            "--db", str(tmp_path / "r.db")]
    first = Started([sys.executable, "-m", "term_fl", *args])
    try:
        deadline = time.monotonic() + 120
        while holder_of(tmp_path / "out") is None:
            assert first.proc.poll() is None and time.monotonic() < deadline, first.output()
            time.sleep(0.1)
        assert_usage_error(main(args), capsys.readouterr().err, [f"pid {first.proc.pid}"])
        assert first.proc.wait(timeout=300) == 0, first.output()
    finally:
        first.stop()
    from term_fl.results import ResultsStore

    with ResultsStore.open_readonly(tmp_path / "r.db") as store:
        runs = store.list_runs()
    assert sorted(r.seed for r in runs) == [0, 1, 2] and {r.status for r in runs} == {"finished"}
    assert all((Path(r.run_dir) / "model.pt").is_file() for r in runs)
    assert not list((tmp_path / "out").rglob("earlier"))
