"""A sweep's cells as Ray tasks on a two-node Ray cluster started here: the sequential sweep's numbers, both nodes used,
a node killed mid-sweep costing a rerun and nothing else.

The cluster is Ray's own test cluster (``ray.cluster_utils.Cluster``): a head
node with one CPU (the driver's, which also runs cells) and a worker node
with one CPU, each a raylet of its own on this machine, in a temp folder of
the test's own (``RAY_TMPDIR``: Ray's address file of "the cluster on this
machine" goes there too, not into other users' /tmp/ray). Every node the
tests start is stopped by the tests, by its own handle.
"""

from __future__ import annotations

import io
import json
import logging
import re
import shutil
import sqlite3
import tempfile
import threading
import time

import pytest
from rich.console import Console

from term_fl.cli.sweep import run_sweep
from term_fl.config import load_scenario

pytestmark = pytest.mark.slow
ray_cluster_utils = pytest.importorskip("ray.cluster_utils")

# 4 cells of a few seconds each (most of it the Ray worker's imports, and a run long enough to be killed in)
SWEEP = """name = "ray-mini"
[run]
rounds = 1200
clients_per_round = 3
evaluate_every = 100
engine = "inprocess"
executor = "compiled"
[data]
num_devices = 6
max_samples = 60
train_fraction = 0.6
val_fraction = 0.2
test_fraction = 0.2
[sweep]
"strategy.name" = ["fedavg", "term"]
"run.seed" = [0, 1]
"""
FAST_HEALTH_CHECKS = {"health_check_initial_delay_ms": 0, "health_check_period_ms": 500,
                      "health_check_failure_threshold": 4}


def _scenario():
    with tempfile.TemporaryDirectory() as folder:
        path = f"{folder}/ray-mini.toml"
        with open(path, "w") as fh:
            fh.write(SWEEP)
        return load_scenario(path, {}, environ={})


def _comparison(out) -> str:
    """comparison.json without what differs between two sweeps of the same cells (wall time, run ids)."""
    data = json.loads((out / "comparison.json").read_text())
    data.pop("wall_time_s")
    return re.sub(r'"run_ids": \[[^\]]*\]', "", json.dumps(data, sort_keys=True))


def _console() -> tuple[Console, io.StringIO]:
    text = io.StringIO()
    return Console(file=text, width=200, force_terminal=False), text


def _runs(db) -> list[tuple[str, str, int, str | None]]:
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
        return conn.execute("SELECT name, status, rounds_completed, error FROM runs").fetchall()


@pytest.fixture(scope="module", autouse=True)
def quiet_flower():
    """Flower's INFO lines off, as ``term-fl sweep`` without -v has them (Ray's workers then log nothing here)."""
    logger = logging.getLogger("flwr")
    level = logger.level
    logger.setLevel(logging.WARNING)
    yield
    logger.setLevel(level)


@pytest.fixture(scope="module")
def sequential(tmp_path_factory):
    """The sweep's comparison, every cell one after another in this process (no Ray)."""
    out = tmp_path_factory.mktemp("sequential")
    console, _ = _console()
    assert run_sweep(_scenario(), db=out / "r.db", out_dir=out / "sweep", engine=None, console=console) == 0
    return _comparison(out / "sweep")


@pytest.fixture(scope="module")
def cluster():
    """A Ray cluster of one head node (1 CPU) on this machine, in a temp folder of its own; stopped at the end."""
    temp = tempfile.mkdtemp(prefix="tfl-rc-", dir="/tmp")  # short: Ray's socket paths stay under 107 bytes
    env = pytest.MonkeyPatch()
    env.setenv("RAY_TMPDIR", temp)
    head = ray_cluster_utils.Cluster(initialize_head=True, head_node_args={
        "num_cpus": 1, "include_dashboard": False, "_system_config": FAST_HEALTH_CHECKS})
    try:
        yield head
    finally:
        head.shutdown()
        env.undo()
        shutil.rmtree(temp, ignore_errors=True)


@pytest.fixture
def worker_node(cluster):
    """A second node (1 CPU) joined to the cluster for one test; removed after it unless the test removed it."""
    node = cluster.add_node(num_cpus=1)
    yield node
    if node in cluster.worker_nodes:
        cluster.remove_node(node)


def test_a_sweep_on_a_two_node_cluster_gives_the_sequential_comparison_with_cells_on_both_nodes(
        cluster, worker_node, sequential, tmp_path):
    console, text = _console()
    code = run_sweep(_scenario(), db=tmp_path / "r.db", out_dir=tmp_path / "sweep", engine=None, console=console,
                     ray_address=cluster.address)
    printed = text.getvalue()
    assert code == 0, printed
    assert _comparison(tmp_path / "sweep") == sequential
    nodes = set(re.findall(r"started on node (\w{8})", printed))
    assert nodes == {cluster.head_node.node_id[:8], worker_node.node_id[:8]}
    assert sorted(status for _, status, _, _ in _runs(tmp_path / "r.db")) == ["finished"] * 4
    # the cluster outlives the sweep that joined it
    assert cluster.remaining_processes_alive()


def test_the_simulation_engine_joins_the_cluster_gives_the_in_process_numbers_and_leaves_it_running(
        cluster, worker_node):
    import ray

    from conftest import small_scenario
    from term_fl.engines import run_scenario
    from test_ray_options import _Threads

    runs = []
    for engine, address in (("inprocess", ""), ("flower", cluster.address)):
        recorder = _Threads()
        run_scenario(small_scenario(f"run.engine={engine}", f"run.ray_address={address}"), recorder)
        runs.append([json.dumps([r.train_rows, r.eval_rows, r.stats], default=str) for r in recorder.records])
    assert runs[0] == runs[1] and len(runs[0]) == 3
    assert not ray.is_initialized()  # disconnected, and the cluster it joined runs on
    assert cluster.remaining_processes_alive()


def test_a_node_killed_mid_sweep_costs_a_rerun_and_nothing_else(cluster, worker_node, sequential, tmp_path):
    console, text = _console()
    db, outcome = tmp_path / "r.db", {}

    def sweep() -> None:
        outcome["code"] = run_sweep(_scenario(), db=db, out_dir=tmp_path / "sweep", engine=None, console=console,
                                    ray_address=cluster.address)

    thread = threading.Thread(target=sweep)
    thread.start()
    # wait for a cell on the worker node to record rounds, then kill that node (no graceful exit)
    victim, deadline = None, time.monotonic() + 240
    while victim is None and time.monotonic() < deadline and thread.is_alive():
        found = re.search(rf"\[cell \d/4\] (.+): started on node {worker_node.node_id[:8]}", text.getvalue())
        if found and db.exists():
            running = [r for r in _runs(db) if r[0].endswith(found.group(1)) and r[1] == "running" and r[2] >= 1]
            victim = found.group(1) if running else None
        time.sleep(0.05)
    assert victim is not None, text.getvalue()
    cluster.remove_node(worker_node, allow_graceful=False)
    thread.join(timeout=400)
    printed = text.getvalue()
    assert not thread.is_alive() and outcome["code"] == 0, printed
    assert f"{victim}: its Ray task was lost" in printed
    assert _comparison(tmp_path / "sweep") == sequential
    runs = _runs(db)
    lost = [r for r in runs if r[1] == "failed"]
    assert len(lost) == 1 and lost[0][0].endswith(victim) and "Ray task was lost" in lost[0][3]
    assert sorted(r[1] for r in runs) == ["failed"] + ["finished"] * 4
    assert list((tmp_path / "sweep").glob("*/earlier/*/summary.json"))  # the lost attempt's files, set aside


@pytest.mark.parametrize("group_size", [1, 2])
def test_parallel_cells_on_a_private_ray_give_the_sequential_comparison_and_resume_as_one_by_one(
        group_size, tmp_path, capsys):
    from test_cli import sweep_file
    from term_fl.cli.commands import main

    config = str(sweep_file(tmp_path))
    assert main(["sweep", config, "--out", str(tmp_path / "seq"), "--db", str(tmp_path / "seq.db")]) == 0
    args = ["sweep", config, "--out", str(tmp_path / "par"), "--db", str(tmp_path / "par.db"), "--parallel", "2",
            "--group-size", str(group_size)]
    capsys.readouterr()
    assert main(args) == 0
    printed = " ".join(capsys.readouterr().out.split())  # the console wraps lines at its width
    tasks = 6 if group_size == 1 else 3  # 6 cells of one group key
    assert f"{tasks} Ray tasks (6 cells) on 1 node(s) with 2 CPUs, at most 2 at a time" in printed
    assert _comparison(tmp_path / "par") == _comparison(tmp_path / "seq")
    assert main(args) == 0  # every cell finished: skipped, no Ray started
    again = capsys.readouterr().out
    assert again.count("already finished, skipped") == 6 and "Ray tasks" not in again


def test_a_cell_that_asks_for_a_gpu_on_a_cluster_without_one_fails_at_once_and_the_others_finish(tmp_path, capsys):
    from term_fl.cli.commands import main

    (tmp_path / "gpu.toml").write_text(
        'name = "gpu-mini"\n[run]\nrounds = 2\nclients_per_round = 3\n[data]\nnum_devices = 6\nmax_samples = 60\n'
        '[sweep]\ncells = [{"client.device" = "cpu"}, {"client.device" = "cuda"}]\n')
    code = main(["sweep", str(tmp_path / "gpu.toml"), "--parallel", "1", "--out", str(tmp_path / "o"),
                 "--db", str(tmp_path / "r.db")])
    printed = " ".join(capsys.readouterr().out.split())  # the console wraps lines at its width
    assert code == 1
    assert "client.device = 'cuda' asks Ray for a GPU and the Ray cluster has none" in printed
    assert "1/2 cells finished" in printed
