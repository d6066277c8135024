"""`flwr run .` in the Simulation Engine (the repository as a Flower app) with fewer SuperNodes than devices.

The run must fail within seconds of the simulation's start with a hint naming
``num-supernodes`` (not wait for ``run.node_timeout``, here longer than the
test's own timeout), be marked failed in the results store and in Flower's
run status, and lay out its results as ``term-fl run`` does. ``flwr run
--stream`` exits 0 all the same (Flower 1.42), as the README says.
"""

from __future__ import annotations

import json
import re
import sqlite3
import time

import pytest
from flwr_local import LocalFlower

from conftest import REPO

DEVICES = 6
OVERRIDES = f"data.num_devices={DEVICES} data.max_samples=60 run.rounds=2 run.clients_per_round=3 run.node_timeout=3600"


@pytest.mark.slow
def test_too_few_supernodes_fail_fast_with_a_hint_and_are_recorded_as_failed(tmp_path):
    local = LocalFlower(tmp_path / "home")
    results = tmp_path / "results"
    try:
        local.start()
        start = time.monotonic()
        result = local.run(REPO, "num-supernodes=2 client-resources-num-cpus=1 client-resources-num-gpus=0.0",
                           f'overrides="{OVERRIDES}" results-dir="{results}"', timeout=900)
        wall = time.monotonic() - start
        runs = local.runs()
    finally:
        local.close()
    out = result.stdout
    assert result.returncode == 0, out[-4000:]  # Flower 1.42: --stream exits 0 whatever the run's status
    assert f"num-supernodes={DEVICES}" in out and "2 virtual SuperNodes" in out, out[-4000:]

    run_id = re.search(r"Successfully started run (\d+)", out).group(1)
    flower_run = {run["run-id"]: run for run in runs}[run_id]
    assert flower_run["status"] == "finished:failed"
    assert f"num-supernodes={DEVICES}" in flower_run["status-details"]

    with sqlite3.connect(results / "results.db") as db:
        ((ours, status, error, run_dir),) = db.execute("SELECT run_id, status, error, run_dir FROM runs").fetchall()
    assert status == "failed" and f"num-supernodes={DEVICES}" in error
    assert run_dir == str(results / ours), "run directories sit beside results.db, as term-fl run lays them out"
    assert json.loads((results / ours / "summary.json").read_text())["status"] == "failed"
    assert not (results / "runs").exists()
    print(f"\nflwr run with too few SuperNodes: exited {wall:.1f} s after submission "
          f"(Flower's own run time {flower_run['elapsed']:.1f} s)")
