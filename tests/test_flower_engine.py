"""The Flower engine's edges: startup failures in one line, quiet logs, the server loop's waits."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from conftest import SMALL
from term_fl.engines.flower import RUN_SIMULATION_NOTICE, without_run_simulation_notice
from term_fl.engines.stoppable import Stop, StoppableGrid

SMALL_SETS = [arg for item in SMALL for arg in ("--set", item)]


def test_only_the_run_simulation_notice_is_dropped(caplog):
    from flwr.supercore.logger import warn_deprecated_feature

    logger = logging.getLogger("flwr")
    logger.addHandler(caplog.handler)
    try:
        with caplog.at_level(logging.WARNING, logger="flwr"), without_run_simulation_notice():
            warn_deprecated_feature(f"{RUN_SIMULATION_NOTICE} and will be removed in a future version of Flower.")
            warn_deprecated_feature("Some other feature is deprecated.")
            logger.warning("an ordinary warning")
        warn_deprecated_feature(f"{RUN_SIMULATION_NOTICE} (outside the block)")
    finally:
        logger.removeHandler(caplog.handler)
    messages = [r.getMessage() for r in caplog.records]
    assert not any(RUN_SIMULATION_NOTICE in m and "outside" not in m for m in messages)
    assert any("Some other feature" in m for m in messages) and "an ordinary warning" in messages
    assert any("outside the block" in m for m in messages)


class SlowPulls:
    """A Grid whose pulls take ``pull_s`` and return one reply each.

    With a ``clock`` (a one-item list read by a patched ``time.perf_counter``)
    a pull advances that clock instead of sleeping: the test's timing is exact
    however loaded the machine is.
    """

    def __init__(self, n: int, pull_s: float, clock: list[float] | None = None) -> None:
        self.pending = [f"m{i}" for i in range(n)]
        self.pull_s = pull_s
        self.clock = clock

    def push_messages(self, messages):
        return list(self.pending)

    def pull_messages(self, ids):
        if self.clock is None:
            time.sleep(self.pull_s)
        else:
            self.clock[0] += self.pull_s
        mid = self.pending.pop(0)

        class Reply:
            class metadata:  # noqa: N801
                reply_to_message_id = mid

        return [Reply]


@pytest.mark.parametrize("pull_s, wait_s", [(0.05, 0.45), (0.0001, 0.01)])
def test_pulls_wait_nine_times_as_long_as_they_took_and_at_least_the_poll_interval(monkeypatch, pull_s, wait_s):
    """A pull that takes 50 ms is followed by a wait of 450 ms, not 10 ms (pulls hold the GIL, so they
    take at most a tenth of the time); a fast pull by the 10 ms poll interval. On a simulated clock."""
    clock, sleeps = [0.0], []
    monkeypatch.setattr(time, "perf_counter", lambda: clock[0])
    monkeypatch.setattr(time, "sleep", sleeps.append)
    grid = StoppableGrid(SlowPulls(3, pull_s, clock), Stop())
    assert len(grid.send_and_receive([object()] * 3)) == 3
    assert sleeps == pytest.approx([wait_s, wait_s])  # no wait after the last reply


def test_a_stopped_server_loop_raises_the_stops_error():
    stop = Stop()
    grid = StoppableGrid(SlowPulls(1, 0.0), stop)
    stop.set()
    with pytest.raises(KeyboardInterrupt):  # Ctrl-C: the run is recorded as interrupted
        grid.get_node_ids()
    stop = Stop()
    stop.set(RuntimeError("Flower's Simulation Engine stopped: boom"))
    with pytest.raises(RuntimeError, match="boom"):  # the engine failed: recorded as failed
        StoppableGrid(SlowPulls(1, 0.0), stop).send_and_receive([object()])


def term_fl(*args: str, env: dict[str, str] | None = None, timeout: float = 180) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "term_fl", *args], capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **(env or {})})


@pytest.mark.slow
def test_ray_that_cannot_start_ends_in_one_line_naming_the_cause_and_the_next_step(tmp_path):
    """Ray's socket paths are limited to 107 bytes: a long RAY_TMPDIR makes Ray itself fail to start."""
    long_dir = tmp_path / ("r" * (110 - len(str(tmp_path))))
    long_dir.mkdir()
    start = time.monotonic()
    done = term_fl("run", "--engine", "flower", *SMALL_SETS, "--out", str(tmp_path / "run"), "--db",
                   str(tmp_path / "r.db"), env={"RAY_TMPDIR": str(long_dir)})
    took = time.monotonic() - start
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith("term-fl: error: Ray could not start: ") and "107 bytes" in done.stderr
    assert done.stderr.rstrip().endswith("Try --engine inprocess.") and done.stderr.count("\n") == 1
    assert "Traceback" not in done.stdout + done.stderr and took < 60
    assert list(long_dir.iterdir()) == []  # its temp folder removed


@pytest.mark.slow
def test_a_client_ray_cannot_host_ends_in_one_line_before_the_server_loop_waits(tmp_path):
    with tempfile.TemporaryDirectory(prefix="tfl-t-", dir="/tmp") as short:  # Ray's sockets: <= 107 bytes
        ray_tmp = Path(short)
        start = time.monotonic()
        done = term_fl("run", "--engine", "flower", *SMALL_SETS, "--set", "resources.num_cpus=64", "--out",
                       str(tmp_path / "run"), "--db", str(tmp_path / "r.db"), env={"RAY_TMPDIR": short})
        took = time.monotonic() - start
        left = list(ray_tmp.iterdir())
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith("term-fl: error: Ray cannot host one virtual client: each asks for 64 CPUs")
    assert "try --engine inprocess." in done.stderr and done.stderr.count("\n") == 1
    assert "Traceback" not in done.stdout + done.stderr and took < 60  # not run.node_timeout (120 s)
    assert left == []


@pytest.mark.slow
@pytest.mark.parametrize("verbose", [False, True])
def test_a_flower_engine_run_prints_no_deprecation_notice_and_no_actor_termination_warnings(verbose, tmp_path,
                                                                                          monkeypatch):
    """Without -v no log line at all; with -v Flower's lines but no deprecation notice, and with the patch
    actor-reuse (actors ended with ray.kill) no 'Manually terminating' warning either. Without that patch
    Flower ends its actors itself, and -v shows its warning per actor."""
    monkeypatch.setenv("TERM_FL_FLOWER_PATCHES", "actor-reuse")
    out = tmp_path / "run"
    done = term_fl("run", "--engine", "flower", *SMALL_SETS, *(["-v"] if verbose else []), "--out", str(out),
                   "--db", str(tmp_path / "r.db"))
    assert done.returncode == 0, done.stdout + done.stderr
    printed = done.stdout + done.stderr
    assert "DEPRECATED FEATURE" not in printed and "Manually terminating" not in printed
    if not verbose:  # the header, progress, the table and the run directory; no log line
        assert done.stderr == ""
        assert "WARNING" not in printed and "INFO" not in printed
        assert "round 3/3" in done.stdout and "Jain's index" in done.stdout and str(out) in " ".join(done.stdout.split())
    else:
        assert "INFO" in printed  # Flower's log lines are there with -v
