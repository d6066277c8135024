"""SIGINT, SIGTERM and SIGHUP stop a run as Ctrl-C does: status ``interrupted``, exit 130 / 143 / 129, nothing left.

``kill``, ``timeout``, ``docker stop``, systemd and CI send SIGTERM; a closed
terminal sends SIGHUP. Each case starts ``term-fl run`` (or a sweep, or the
deployment's ServerApp entry point) as a process, waits for recorded rounds,
sends the signal to that process alone (SIGINT: to its process group, as a
terminal's Ctrl-C does), and checks the exit status, the store, and that
every process it started is gone, by process id and start time (never by name).
"""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from conftest import REPO, SMALL
from term_fl.cli.signals import stop_signals_interrupt
from term_fl.common.errors import Interrupted
from term_fl.engines.flower import sigterm_handler_kept
from term_fl.engines.watchdog import descendants

from test_engines import descendants_alive, rounds_recorded

STATUS = {signal.SIGINT: 130, signal.SIGTERM: 143, signal.SIGHUP: 129}
REASON = {signal.SIGINT: "interrupted by the user", signal.SIGTERM: "interrupted by SIGTERM",
          signal.SIGHUP: "interrupted by SIGHUP"}


def test_sigterm_and_sighup_raise_interrupted_in_the_block_and_the_handlers_of_before_come_back():
    before = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGHUP)}
    for sig in (signal.SIGTERM, signal.SIGHUP):
        with pytest.raises(Interrupted) as info, stop_signals_interrupt():
            os.kill(os.getpid(), sig)
            time.sleep(5)  # the handler raises in the main thread at once
        assert (info.value.signum, info.value.exit_status, str(info.value)) == (
            sig, STATUS[sig], REASON[sig])
        assert isinstance(info.value, KeyboardInterrupt)  # every engine stops on it as on Ctrl-C
    assert {sig: signal.getsignal(sig) for sig in before} == before


def test_a_second_signal_while_the_run_is_recorded_as_interrupted_is_ignored():
    with pytest.raises(Interrupted), stop_signals_interrupt():
        try:
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(5)
        finally:  # what the server loop does after the first: record the run; a second SIGTERM changes nothing
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(0.1)


def test_ray_init_does_not_take_sigterm_from_the_command_line():
    """ray.init sets a SIGTERM handler that calls sys.exit (a crash dump of Flower's engine); the block undoes it."""

    def ours(signum, frame):
        raise AssertionError("not called")

    previous = signal.signal(signal.SIGTERM, ours)
    try:
        with sigterm_handler_kept():
            signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(signum))  # what ray.init does
        assert signal.getsignal(signal.SIGTERM) is ours
    finally:
        signal.signal(signal.SIGTERM, previous)


class Started:
    """A term-fl process started in a session of its own, its output collected, stopped at the end."""

    def __init__(self, cmd: list[str], cwd: Path | None = None) -> None:
        # A shell that starts the test suite in the background makes its children ignore SIGINT;
        # a terminal's Ctrl-C reaches a program with the default disposition, so restore it.
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                     start_new_session=True, cwd=cwd,
                                     preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
        self.lines: list[str] = []
        self.reader = threading.Thread(target=lambda: self.lines.extend(self.proc.stdout), daemon=True)
        self.reader.start()

    def wait_for_rounds(self, db: Path, rounds: int, timeout: float = 240) -> None:
        deadline = time.monotonic() + timeout
        while rounds_recorded(db) < rounds:
            assert self.proc.poll() is None and time.monotonic() < deadline, self.output()
            time.sleep(0.2)

    def send(self, sig: int) -> None:
        if sig == signal.SIGINT:
            os.killpg(self.proc.pid, sig)  # a terminal's Ctrl-C reaches the foreground process group
        else:
            self.proc.send_signal(sig)  # kill PID, timeout, docker stop: the process alone

    def output(self) -> str:
        return "".join(self.lines[-30:])

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        self.reader.join(5)


def run_command(tmp_path: Path, engine: str) -> list[str]:
    sets = [arg for item in [*SMALL, "run.rounds=500", f"run.engine={engine}"] for arg in ("--set", item)]
    return [sys.executable, "-m", "term_fl", "run", *sets, "--out", str(tmp_path / "run"), "--db", str(tmp_path / "r.db")]


def assert_stops_as_interrupted(started: Started, db: Path, sig: int, *, within: float) -> None:
    """Send ``sig`` after 2 recorded rounds: the exit status, the run interrupted with the signal named, no process
    started by the run still there a few seconds later."""
    try:
        started.wait_for_rounds(db, 2)
        noted = descendants(started.proc.pid)
        sent = time.monotonic()
        started.send(sig)
        rc = started.proc.wait(timeout=60)
        waited = time.monotonic() - sent
        deadline = time.monotonic() + 15  # the watchdog ends what an abandoned Ray shutdown left, within seconds
        while descendants_alive(noted) and time.monotonic() < deadline:
            time.sleep(0.2)
        left = descendants_alive(noted)
    finally:
        started.stop()
    assert rc == STATUS[sig], started.output()
    assert waited < within, f"took {waited:.1f} s to stop"
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT status, error FROM runs").fetchall() == [("interrupted", REASON[sig])]
        assert conn.execute("SELECT COUNT(*) FROM rounds").fetchone()[0] >= 2
    assert left == {}, f"left running: {left}"
    assert f"term-fl: interrupted{'' if sig == signal.SIGINT else ' by ' + signal.Signals(sig).name}" in started.output()


@pytest.mark.parametrize("sig", [signal.SIGTERM, pytest.param(signal.SIGHUP, marks=pytest.mark.slow),
                                 pytest.param(signal.SIGINT, marks=pytest.mark.slow)],
                         ids=["SIGTERM", "SIGHUP", "SIGINT"])
def test_a_signal_stops_an_in_process_run_as_interrupted(sig, tmp_path):
    started = Started(run_command(tmp_path, "inprocess"))
    assert_stops_as_interrupted(started, tmp_path / "r.db", sig, within=10)
    assert not (tmp_path / "run" / ".term-fl.lock").exists()  # the run folder is free again


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP, signal.SIGINT], ids=["SIGTERM", "SIGHUP", "SIGINT"])
def test_a_signal_stops_a_flower_engine_run_as_interrupted_and_leaves_no_ray_process(sig, tmp_path):
    """SIGTERM used to end in Ray's crash dump (exit 134) and a run left running; no Ray process may stay."""
    started = Started(run_command(tmp_path, "flower"))
    assert_stops_as_interrupted(started, tmp_path / "r.db", sig, within=10)


@pytest.mark.slow
def test_sigterm_stops_a_sweep_its_cell_interrupted_and_its_folder_free(tmp_path):
    sweep = tmp_path / "s.toml"
    sweep.write_text('[sweep]\n"run.seed" = [0, 1]\n')
    sets = [arg for item in [*SMALL, "run.rounds=500"] for arg in ("--set", item)]
    started = Started([sys.executable, "-m", "term_fl", "sweep", str(sweep), *sets, "--out", str(tmp_path / "out"),
                       "--db", str(tmp_path / "r.db")])
    assert_stops_as_interrupted(started, tmp_path / "r.db", signal.SIGTERM, within=10)
    assert not list((tmp_path / "out").rglob(".term-fl.lock"))


# The deployment's ServerApp (server/app.py) as flwr-serverapp runs it: Flower's own signal handlers, whose
# graceful exit raises SystemExit in the ServerApp's thread; here over the in-process grid.
SERVERAPP = textwrap.dedent("""
    import sys
    from flwr.app import Context, RecordDict
    from flwr.supercore.exit import register_signal_handlers
    from flwr.supercore.telemetry import EventType
    from server.app import main
    from term_fl.clientapp.app import make_client_app
    from term_fl.clientapp.cache import ClientCache
    from term_fl.engines.inprocess import InProcessGrid

    register_signal_handlers(event_type=EventType.FLWR_SERVERAPP_RUN_LEAVE, exit_message="Task stopped by user.")
    context = Context(run_id=1, node_id=0, node_config={}, state=RecordDict(),
                      run_config={"overrides": sys.argv[1], "results-dir": sys.argv[2]})
    with InProcessGrid(make_client_app(ClientCache()), 6) as grid:
        main(grid, context)
""")


def test_the_deployments_serverapp_records_its_run_as_interrupted_on_sigterm(tmp_path):
    """docker compose stop: Flower's flwr-serverapp exits gracefully on SIGTERM (or when its SuperExec is gone);
    the run it was running is then interrupted, not left running to be found lost a minute later."""
    overrides = " ".join([*SMALL, "run.rounds=500", "run.engine=inprocess"])
    started = Started([sys.executable, "-c", SERVERAPP, overrides, str(tmp_path)], cwd=REPO)
    db = tmp_path / "results.db"
    try:
        started.wait_for_rounds(db, 2)
        started.send(signal.SIGTERM)
        started.proc.wait(timeout=30)
    finally:
        started.stop()
    with sqlite3.connect(db) as conn:
        status, error = conn.execute("SELECT status, error FROM runs").fetchone()
    # recorded by the exit handler the ServerApp adds to Flower's (or, had the signal come in the middle of a
    # store write, by the SystemExit that Flower's exit raises in the server loop)
    assert status == "interrupted", started.output()
    assert error in ("the ServerApp was stopped (Flower's graceful exit)", "the process was asked to exit (SystemExit 0)")
