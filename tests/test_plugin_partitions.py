"""AFL and the sampling keywords in a plain Flower app: term_fl.plugin.partitions (issue 23).

A NumPy ClientApp and a ServerApp written as a Flower user writes them, run
on in-process nodes: with the two lines of term_fl.plugin.partitions AFL
trains; without them it stops with an error naming ``partition-id`` and the
helper instead of running rounds in which every reply is excluded.
"""

from __future__ import annotations

import logging

import numpy as np
import pytest
from flwr.app import ArrayRecord, Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp
from flwr.serverapp.exception import AggregationError

from term_fl.engines.inprocess import InProcessGrid
from term_fl.plugin import train_metrics
from term_fl.plugin.numpy_loss import pre_training_loss
from term_fl.plugin.partitions import PartitionQueryError, node_partitions, partition_reply
from term_fl.strategies import AFL, TermFedAvg

NODES = 4


def data(partition: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(partition)
    x = rng.normal(size=(20, 3))
    return x, x @ np.array([1.0, -1.0, 0.5]) * (partition + 1)


def loss_fn(params, x, y):
    return (x @ params[0] - y) ** 2


def client_app(answers_query: bool = True) -> ClientApp:
    app = ClientApp()
    if answers_query:
        app.query()(partition_reply)  # term-fl: the partition table

    @app.train()
    def train(msg: Message, context: Context) -> Message:
        partition = context.node_config["partition-id"]
        (w,) = msg.content["arrays"].to_numpy_ndarrays()
        x, y = data(partition)
        loss_before = pre_training_loss([w], [(x, y)], loss_fn)
        w = w - 0.05 * 2 * x.T @ (x @ w - y) / len(y)
        metrics = MetricRecord({"num-examples": len(y), **train_metrics(loss_before, partition_id=partition)})
        return Message(RecordDict({"arrays": ArrayRecord([w]), "metrics": metrics}), reply_to=msg)

    return app


def serve(strategy, answers_query: bool = True, learn_table: bool = True, rounds: int = 3):
    with InProcessGrid(client_app(answers_query), NODES) as grid:
        if learn_table:
            strategy.set_node_partitions(node_partitions(grid, expected=NODES, timeout=10))  # term-fl
        return strategy.start(grid=grid, initial_arrays=ArrayRecord([np.zeros(3)]), num_rounds=rounds)


def test_afl_trains_in_a_plain_flower_app_with_the_partition_helpers():
    strategy = AFL(lambda_lr=0.5, fraction_evaluate=0.0, min_available_nodes=NODES)
    result = serve(strategy)
    assert len(strategy.history) == 3
    for report in strategy.history:
        assert report.partition_ids == [0, 1, 2, 3] and report.excluded == []
    lam = strategy.mixture_weights
    assert set(lam) == {0, 1, 2, 3} and lam[3] > lam[0]  # the hardest partition (largest targets) gains weight
    assert not np.allclose(result.arrays.to_numpy_ndarrays()[0], 0.0)


def test_afl_without_the_table_stops_at_once_naming_partition_id_and_the_helper():
    strategy = AFL(fraction_evaluate=0.0, min_available_nodes=NODES)
    with pytest.raises(AggregationError, match=r"(?s)'partition-id'.*partition_reply.*node_partitions\(grid"):
        serve(strategy, learn_table=False)
    assert strategy.history == []


def test_node_partitions_names_the_client_helper_when_nodes_do_not_answer():
    with pytest.raises(PartitionQueryError, match=r"did not answer the partition query.*app.query\(\)\(partition_reply\)"):
        serve(AFL(), answers_query=False)


def test_node_partitions_maps_every_node_to_its_partition():
    with InProcessGrid(client_app(), NODES) as grid:
        table = node_partitions(grid, expected=NODES, timeout=10)
        assert sorted(table.values()) == list(range(NODES)) and set(table) == set(grid.get_node_ids())
        with pytest.raises(PartitionQueryError, match=f"only {NODES} of {NODES + 1} nodes connected"):
            node_partitions(grid, expected=NODES + 1, timeout=0.2, poll_s=0.05)


def test_sampling_keywords_without_the_table_warn_once(caplog):
    strategy = TermFedAvg(t=0.5, clients_per_round=2, seed=3, fraction_evaluate=0.0, min_available_nodes=NODES)
    with caplog.at_level(logging.WARNING, logger="flwr"):
        serve(strategy, learn_table=False, rounds=2)
    warnings = [r.getMessage() for r in caplog.records if "take effect once set_node_partitions" in r.getMessage()]
    assert warnings == ["TermFedAvg: clients_per_round=2, seed=3 take effect once set_node_partitions was called (the "
                        "partition of each node: term_fl.plugin.partitions.node_partitions(grid) learns it); until "
                        "then Flower's unseeded sampling by fraction_train / fraction_evaluate / min_train_nodes "
                        "applies"]
