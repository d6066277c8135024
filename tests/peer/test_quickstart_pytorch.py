"""Flower's quickstart-pytorch app, with a BatchNorm layer and the loss helper, under each strategy.

``quickstart_pytorch/`` (see README.md beside this file) runs for 3 rounds on
4 virtual SuperNodes in Flower's Simulation Engine through ``flwr run APP``
(tests/flwr_local.py), once with FedAvg, TermFedAvg and QFFL. Its clients
add the two lines of ``term_fl.plugin.losses.pre_training_loss``. Every round must
aggregate every reply (the 0-d int64 ``num_batches_tracked`` keeps its shape
and dtype, so no reply is excluded for a shape mismatch from round 2 on) and
change the model; TERM must tilt by the pre-training losses, not by Flower's
``train_loss``.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
from flwr_local import LocalFlower

APP = Path(__file__).resolve().parent / "quickstart_pytorch"
NODES = 4
FEDERATION = f"num-supernodes={NODES} client-resources-num-cpus=1 client-resources-num-gpus=0.0"


@pytest.fixture(scope="module")
def flower(tmp_path_factory):
    local = LocalFlower(tmp_path_factory.mktemp("flwr-local"))
    try:
        local.start()
        yield local
    finally:
        local.close()


@pytest.mark.slow
@pytest.mark.parametrize("strategy", ["fedavg", "term", "qffl"])
def test_a_batchnorm_model_trains_every_round(flower, strategy, tmp_path):
    report_path = tmp_path / "report.json"
    result = flower.run(APP, FEDERATION, f'strategy="{strategy}" report="{report_path}"', timeout=900)
    assert result.returncode == 0 and report_path.is_file(), result.stdout[-6000:]
    report = json.loads(report_path.read_text())

    rounds = report["rounds"]
    assert [r["server_round"] for r in rounds] == [1, 2, 3]
    for r in rounds:
        assert r["aggregated"] == NODES and r["excluded"] == [], r

    snapshots = report["snapshots"]  # the global model before round 1 and after each round
    assert [s["server_round"] for s in snapshots] == [0, 1, 2, 3]
    for s in snapshots:
        assert s["num_batches_tracked"]["shape"] == [] and s["num_batches_tracked"]["dtype"] == "int64"
        assert s["dtypes"] == snapshots[0]["dtypes"] and s["shapes"] == snapshots[0]["shapes"]
    counters = [s["num_batches_tracked"]["value"] for s in snapshots]
    assert counters == sorted(set(counters)), f"num_batches_tracked grows every round: {counters}"
    for key in ("conv1_weight_sum", "bn1_running_mean_sum"):
        values = [s[key] for s in snapshots]
        assert len(set(values)) == len(values), f"{key} changes every round: {values}"

    for r in rounds:
        losses, weights = np.array(r["losses"]), np.array(r["weights"])
        metrics = report["train_metrics"][str(r["server_round"])]
        # equal n_k: the aggregated train_loss_before is the mean of the losses the strategy read
        assert np.mean(losses) == pytest.approx(metrics["train_loss_before"], rel=1e-9)
        assert np.mean(losses) != pytest.approx(metrics["train_loss"], rel=1e-6)  # not Flower's train_loss
        if strategy == "term":  # t = 1, equal n_k: p_k = softmax(F_k)
            expected = np.exp(losses - losses.max()) / np.exp(losses - losses.max()).sum()
            np.testing.assert_allclose(weights, expected, rtol=1e-9)
        elif strategy == "fedavg":
            np.testing.assert_allclose(weights, np.full(NODES, 1 / NODES), rtol=1e-12)
        else:
            assert np.all(weights > 0) and np.all(np.isfinite(weights))

    run_id = re.search(r"Successfully started run (\d+)", result.stdout).group(1)
    assert {run["run-id"]: run["status"] for run in flower.runs()}[run_id] == "finished:completed"
