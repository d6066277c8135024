"""The watchdog ends what a killed run started, and nothing else; a run that ends normally leaves it idle."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from term_fl.engines.watchdog import descendants

pytestmark = pytest.mark.skipif(not Path("/proc").is_dir(), reason="the watchdog reads /proc (Linux)")

# A stand-in for `term-fl run`: starts the guard, then a child that (like Ray's agents) would outlive it,
# in a session of its own so that killing the stand-in does not kill the child.
WATCHDOG = Path(__file__).resolve().parents[1] / "term_fl" / "engines" / "watchdog.py"
RUN = textwrap.dedent(f"""
    import importlib.util, subprocess, sys, time
    spec = importlib.util.spec_from_file_location("watchdog", {str(WATCHDOG)!r})  # without term_fl's heavy imports
    watchdog_module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(watchdog_module)
    orphan_guard = watchdog_module.orphan_guard
    with orphan_guard(sys.argv[2]) as watchdog:
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"], start_new_session=True)
        print(watchdog.proc.pid, child.pid, flush=True)
        if sys.argv[1] == "normal":
            child.terminate(); child.wait()
        else:
            time.sleep(300)
""")


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def wait_gone(pids, timeout: float) -> list[int]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and any(alive(p) for p in pids):
        time.sleep(0.1)
    return [p for p in pids if alive(p)]


def start(mode: str, folder: Path):
    folder.mkdir()
    (folder / "session.log").write_text("Ray's logs")
    proc = subprocess.Popen([sys.executable, "-c", RUN, mode, str(folder)], stdout=subprocess.PIPE, text=True)
    watchdog_pid, child_pid = map(int, proc.stdout.readline().split())
    return proc, watchdog_pid, child_pid


def test_a_sigkilled_run_leaves_no_process_and_no_temporary_folder_behind(tmp_path):
    proc, watchdog_pid, child_pid = start("killed", tmp_path / "ray-tmp")
    try:
        time.sleep(1.5)  # the watchdog notes the child at its next look (every 0.5 s)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        assert wait_gone([child_pid, watchdog_pid], timeout=10) == []
        assert not (tmp_path / "ray-tmp").exists()
    finally:
        for pid in (child_pid, watchdog_pid):
            if alive(pid):
                os.kill(pid, signal.SIGKILL)


def test_a_run_that_ends_normally_releases_the_watchdog_without_signalling_anything(tmp_path):
    proc, watchdog_pid, child_pid = start("normal", tmp_path / "ray-tmp")
    assert proc.wait(timeout=30) == 0
    assert wait_gone([watchdog_pid], timeout=10) == []
    assert (tmp_path / "ray-tmp" / "session.log").is_file()  # the run's own cleanup is the run's business


def test_descendants_lists_children_and_grandchildren_only():
    grand = subprocess.Popen([sys.executable, "-c",
                              "import subprocess, sys, time; "
                              "p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(30)']); "
                              "print(p.pid, flush=True); time.sleep(30)"], stdout=subprocess.PIPE, text=True)
    try:
        grandchild = int(grand.stdout.readline())
        found = descendants(os.getpid())
        assert grand.pid in found and grandchild in found
        assert os.getpid() not in found and os.getppid() not in found
    finally:
        grand.kill()
        grand.wait()
        os.kill(grandchild, signal.SIGKILL)
