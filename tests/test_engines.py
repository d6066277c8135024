"""Flower's Simulation Engine end to end, and its equivalence with the in-process engine.

Equivalence is the in-process engine's contract: the same scenario and seed
record the same per-device metrics every round (to 1e-6 on CPU).
"""

from __future__ import annotations

import subprocess
import time

import numpy as np
import pytest

from conftest import small_scenario
from term_fl.results import ResultsStore
from term_fl.runs.run import run_one
from term_fl.strategies.registry import STRATEGIES

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module", autouse=True)
def one_ray_instance():
    """One Ray instance for the module (as a sweep does), with every opt-in patch of the Simulation Engine
    (tests/test_flower_patches.py runs without them); shut down at the end."""
    from term_fl.engines.flower import ray_session
    from term_fl.flower_internals import override

    with override(patches="all"), ray_session(small_scenario()):
        yield
    assert no_ray_left() and not raylet_processes()


def no_ray_left() -> bool:
    import ray

    return not ray.is_initialized()


def raylet_processes() -> list[str]:
    """raylet processes that are children of this test process (never matched by name alone)."""
    import os

    out = subprocess.run(["ps", "-o", "pid=,ppid=,comm="], capture_output=True, text=True, check=False).stdout
    mine = str(os.getpid())
    return [line for line in out.splitlines() if "raylet" in line and line.split()[1] == mine]


@pytest.mark.parametrize("strategy", list(STRATEGIES))  # every registered strategy, AFL included
def test_flower_and_inprocess_engines_record_the_same_metrics(strategy, tmp_path):
    store = ResultsStore(tmp_path / "results.db")
    ids = {}
    for engine in ("flower", "inprocess"):
        scenario = small_scenario(f"run.engine={engine}", f"strategy.name={strategy}", "strategy.term.t=2")
        ids[engine] = run_one(scenario, store, out_dir=tmp_path / engine).run_id
    for split in ("val", "test"):
        flower, inproc = (store.load_metrics(ids[e], split) for e in ("flower", "inprocess"))
        assert len(flower["round"]) == 3 * 6
        np.testing.assert_array_equal(flower["partition_id"], inproc["partition_id"])
        for key in ("loss", "accuracy"):
            np.testing.assert_allclose(flower[key], inproc[key], rtol=0, atol=1e-6)
        np.testing.assert_array_equal(flower["correct"], inproc["correct"])
    flower_train, inproc_train = (store.load_train(ids[e]) for e in ("flower", "inprocess"))
    np.testing.assert_array_equal(flower_train["partition_id"], inproc_train["partition_id"])
    for key in ("train_loss", "tilted_weight"):
        np.testing.assert_allclose(flower_train[key], inproc_train[key], rtol=0, atol=1e-6)
    assert [r.status for r in (store.get_run(ids["flower"]),)] == ["finished"]


def test_a_session_reuses_its_client_actors_and_the_numbers_do_not_change(tmp_path):
    """A second simulation in one ray_session runs on the first one's actors, with identical records."""
    from term_fl.engines.flower import actors_reused

    store = ResultsStore(tmp_path / "results.db")
    scenario = small_scenario("run.engine=flower", "strategy.name=term", "strategy.t=2")
    first = run_one(scenario, store, out_dir=tmp_path / "first").run_id
    reused = actors_reused()
    second = run_one(scenario, store, out_dir=tmp_path / "second").run_id
    assert actors_reused() == reused + 1
    for split in ("val", "test"):
        a, b = store.load_metrics(first, split), store.load_metrics(second, split)
        assert all(np.array_equal(a[k], b[k]) for k in ("partition_id", "loss", "accuracy", "correct"))
    a, b = store.load_train(first), store.load_train(second)
    assert all(np.array_equal(a[k], b[k], equal_nan=True) for k in ("partition_id", "train_loss", "tilted_weight"))


def test_a_failed_simulation_leaves_the_session_able_to_run_the_next_one(tmp_path):
    """Clients that all fail (CUDA asked for on a CPU machine) fail the run; the next run still works."""
    import torch

    from term_fl.federation.loop import FederationError

    if torch.cuda.is_available():
        pytest.skip("needs a machine without CUDA, so that client.device=cuda fails in the clients")
    from term_fl.engines.flower import run_flower_simulation
    from term_fl.runs.run import RunRecorder

    store = ResultsStore(tmp_path / "results.db")
    failing = small_scenario("run.engine=flower", "client.device=cuda", "run.max_failed_rounds=1")
    # run_one refuses client.device=cuda up front on this machine (engines.check_machine); the engine
    # itself, driven directly, must still survive a simulation whose clients all fail
    with pytest.raises(FederationError, match="consecutive rounds without a valid training reply"):
        run_flower_simulation(failing, 6, RunRecorder(store, tmp_path / "failing"))
    ok = run_one(small_scenario("run.engine=flower"), store, out_dir=tmp_path / "ok")
    assert store.get_run(ok.run_id).status == "finished"
    assert len(store.load_metrics(ok.run_id, "test")["round"]) == 3 * 6


def test_ctrl_c_on_the_flower_engine_marks_the_run_interrupted_and_exits_promptly(tmp_path):
    """SIGINT to the whole process group (a terminal's Ctrl-C) mid-run: exit code 130 within seconds,
    the completed rounds kept, the run marked interrupted, no Ray process left."""
    import os
    import signal
    import sqlite3
    import sys
    import threading
    import time

    from conftest import SMALL

    sets = [arg for item in [*SMALL, "run.rounds=500", "run.engine=flower"] for arg in ("--set", item)]
    cmd = [sys.executable, "-m", "term_fl", "run", *sets, "--out", str(tmp_path / "run"), "--db", str(tmp_path / "r.db")]
    # A shell that starts the test suite in the background makes its children ignore SIGINT;
    # a terminal's Ctrl-C reaches a program with the default disposition, so restore it.
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(proc.stdout), daemon=True)
    reader.start()
    try:
        deadline = time.monotonic() + 180
        while rounds_recorded(tmp_path / "r.db") < 2:
            assert proc.poll() is None and time.monotonic() < deadline, "".join(lines[-20:])
            time.sleep(0.2)
        sent = time.monotonic()
        os.killpg(proc.pid, signal.SIGINT)
        rc = proc.wait(timeout=60)
        waited = time.monotonic() - sent
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    reader.join(5)
    assert rc == 130, "".join(lines[-20:])
    assert waited < 5, f"took {waited:.1f} s to stop"  # ~2 s measured at load average 17 on 2 cores
    with sqlite3.connect(tmp_path / "r.db") as db:
        assert db.execute("SELECT status FROM runs").fetchall() == [("interrupted",)]
        assert db.execute("SELECT COUNT(*) FROM rounds").fetchone()[0] >= 2
    assert not any("raylet" in line for line in
                   subprocess.run(["ps", "-eo", "pgid=,comm="], capture_output=True, text=True).stdout.splitlines()
                   if line.split()[0] == str(proc.pid))


def test_a_sigkilled_flower_run_leaves_no_process_behind_15_s_later(tmp_path):
    """SIGKILL of `term-fl run` mid-run: Ray's agents and workers outlived it; the run's watchdog ends them."""
    import os
    import signal
    import sys
    import threading
    import time

    from conftest import SMALL
    from term_fl.engines.watchdog import descendants

    sets = [arg for item in [*SMALL, "run.rounds=500", "run.engine=flower"] for arg in ("--set", item)]
    cmd = [sys.executable, "-m", "term_fl", "run", *sets, "--out", str(tmp_path / "run"), "--db", str(tmp_path / "r.db")]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines: list[str] = []
    threading.Thread(target=lambda: lines.extend(proc.stdout), daemon=True).start()
    started: dict[int, int] = {}
    try:
        deadline = time.monotonic() + 180
        while rounds_recorded(tmp_path / "r.db") < 2:
            assert proc.poll() is None and time.monotonic() < deadline, "".join(lines[-20:])
            time.sleep(0.2)
        started = descendants(proc.pid)
        assert len(started) >= 4  # the watchdog, Ray's GCS, raylet, agents, workers
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        time.sleep(15)
        left = [pid for pid, start in descendants_alive(started).items()]
        assert left == [], f"left running 15 s after SIGKILL: {left}"
    finally:
        for pid in descendants_alive(started):
            os.kill(pid, signal.SIGKILL)


def descendants_alive(noted: dict[int, int]) -> dict[int, int]:
    """The noted processes that still run (same start time, not a zombie)."""
    from pathlib import Path

    alive = {}
    for pid, start in noted.items():
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[0] != "Z" and int(fields[19]) == start:
            alive[pid] = start
    return alive


def rounds_recorded(db) -> int:
    """Rounds in a results store that a running process writes (0 while it does not exist yet)."""
    import sqlite3

    if not db.exists():
        return 0
    try:
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
            return conn.execute("SELECT COUNT(*) FROM rounds").fetchone()[0]
    except sqlite3.OperationalError:  # the schema is not written yet
        return 0


def test_an_engine_that_stops_fails_the_run_at_once_not_after_the_node_timeout(tmp_path, monkeypatch):
    """Flower's engine crashing after the server loop started: one EngineError naming the cause, the run
    recorded as failed, within seconds (the server loop would otherwise wait run.node_timeout for nodes)."""
    from flwr.server.superlink.fleet.vce.backend import raybackend

    from term_fl.engines.flower import EngineError

    def broken_backend(self, backend_config):
        raise ValueError("no backend today")

    monkeypatch.setattr(raybackend.RayBackend, "__init__", broken_backend)
    store = ResultsStore(tmp_path / "results.db")
    start = time.monotonic()
    with pytest.raises(EngineError, match="Flower's Simulation Engine stopped: no backend today. Run with -v"):
        run_one(small_scenario("run.engine=flower", "run.node_timeout=120"), store, out_dir=tmp_path / "run")
    assert time.monotonic() - start < 60
    (run,) = store.list_runs()
    assert run.status == "failed" and "no backend today" in (run.error or "")
